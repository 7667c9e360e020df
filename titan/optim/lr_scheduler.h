// Learning-rate schedules. `step` is always the 0-based index of the optimizer step
// about to be taken (TorchTitan's LambdaLR last_epoch, nanoGPT's iter_num): set the lr
// with apply(opt, k) right before the (k+1)-th opt.step().
//
// Schedules (LRSchedulerConfig::name):
//  - "wsd": TorchTitan's linear_warmup_stable_decay (torchtitan/components/
//    lr_scheduler.py) — the one TorchTitan uses. With W = min(warmup_steps, total),
//    D = decay_ratio < 0 ? total − W : min(round(total·decay_ratio), total − W) and
//    S = total + 1 − W − D (the +1 keeps the last lr above the floor):
//      k < W:      (k+1)/W
//      k < W+S:    1
//      else:       p = (k+1 − W − S)/D, base = 1−p | 1−√p | ½(1+cos πp)  (decay_type)
//                  m + (1−m)·base,  m = min_lr_factor (or min_lr/base_lr if min_lr ≥ 0)
//    lr = base_lr · multiplier (LambdaLR). Steps past the total hold the last phase's
//    end value (p is clamped to 1; TorchTitan never evaluates them).
//  - "linear" / "cosine": "wsd" with decay_type linear / cosine and no stable phase.
//  - "constant": "wsd" without a decay phase (warmup, then base_lr).
//  - "warmup_cosine": nanoGPT's get_lr(it) (karpathy/nanoGPT train.py), same formula:
//      it < W:                lr·(it+1)/(W+1)
//      it > lr_decay_iters:   min_lr
//      else:                  r = (it − W)/(lr_decay_iters − W), c = ½(1+cos πr),
//                             min_lr + c·(lr − min_lr)
//    where min_lr is the absolute min_lr (nanoGPT's; shakespeare_char: lr 1e-3,
//    min_lr 1e-4, warmup 100, lr_decay_iters 5000) or base_lr·min_lr_factor.
#pragma once
#include <cstdint>
#include <string>

namespace titan::optim {

class Optimizer;

struct LRSchedulerConfig {
  std::string name = "wsd";           // wsd | linear | cosine | constant | warmup_cosine
  int64_t warmup_steps = 200;
  double decay_ratio = -1.0;          // wsd: fraction of total steps in the decay; < 0 = None
  std::string decay_type = "linear";  // wsd: linear | sqrt | cosine
  double min_lr_factor = 0.0;         // floor as a fraction of the base lr
  double min_lr = -1.0;               // absolute floor; >= 0 replaces min_lr_factor
  int64_t lr_decay_iters = 0;         // warmup_cosine: end of the decay (0 = total steps)
};

class LRScheduler {
 public:
  // total_steps: the number of training steps (TorchTitan training.steps). Throws
  // titan::Error on an unknown name/decay_type, total_steps < 1, warmup_steps < 0,
  // min_lr_factor outside [0, 1], decay_ratio > 1, or lr_decay_iters <= warmup_steps
  // for warmup_cosine.
  LRScheduler(const LRSchedulerConfig& cfg, int64_t total_steps);

  // The lr for step k (0-based) of a parameter group whose peak lr is base_lr.
  // Throws titan::Error on k < 0.
  double lr(int64_t step, double base_lr) const;
  // Sets every group's lr of `opt` for step k from its base lr.
  void apply(Optimizer& opt, int64_t step) const;

  const LRSchedulerConfig& config() const { return cfg_; }
  int64_t warmup_steps() const { return warmup_; }
  int64_t stable_steps() const { return stable_; }
  int64_t decay_steps() const { return decay_; }

 private:
  enum class Kind { wsd, warmup_cosine };
  enum class Decay { linear, sqrt, cosine };
  double wsd_multiplier(int64_t k, double min_factor) const;
  LRSchedulerConfig cfg_;
  Kind kind_ = Kind::wsd;
  Decay decay_type_ = Decay::linear;
  int64_t total_ = 0, warmup_ = 0, stable_ = 0, decay_ = 0, decay_iters_ = 0;
};

}  // namespace titan::optim
