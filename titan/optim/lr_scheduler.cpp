#include "titan/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "titan/core/error.h"
#include "titan/optim/optimizer.h"

namespace titan::optim {

LRScheduler::LRScheduler(const LRSchedulerConfig& cfg, int64_t total_steps) : cfg_(cfg) {
  TITAN_CHECK(total_steps >= 1, "LRScheduler: total_steps must be >= 1, got {}", total_steps);
  TITAN_CHECK(cfg.warmup_steps >= 0, "LRScheduler: lr_scheduler.warmup_steps must be >= 0, got {}",
              cfg.warmup_steps);
  TITAN_CHECK(cfg.min_lr_factor >= 0.0 && cfg.min_lr_factor <= 1.0,
              "LRScheduler: lr_scheduler.min_lr_factor must be in [0, 1], got {}", cfg.min_lr_factor);
  TITAN_CHECK(cfg.decay_ratio <= 1.0, "LRScheduler: lr_scheduler.decay_ratio must be <= 1, got {}",
              cfg.decay_ratio);
  total_ = total_steps;
  const std::string& n = cfg.name;
  std::string decay_type = cfg.decay_type;
  double decay_ratio = cfg.decay_ratio;
  if (n == "warmup_cosine") {
    kind_ = Kind::warmup_cosine;
    warmup_ = cfg.warmup_steps;
    decay_iters_ = cfg.lr_decay_iters > 0 ? cfg.lr_decay_iters : total_steps;
    TITAN_CHECK(decay_iters_ > warmup_,
                "LRScheduler: warmup_cosine needs lr_decay_iters ({}) > warmup_steps ({})",
                decay_iters_, warmup_);
    return;
  } else if (n == "linear" || n == "cosine") {
    decay_type = n;
    decay_ratio = -1.0;
  } else if (n == "constant") {
    decay_ratio = 0.0;
  } else {
    TITAN_CHECK(n == "wsd",
                "LRScheduler: lr_scheduler.name '{}' is not known (expected wsd, linear, cosine, "
                "constant or warmup_cosine)", n);
  }
  if (decay_type == "linear") decay_type_ = Decay::linear;
  else if (decay_type == "sqrt") decay_type_ = Decay::sqrt;
  else if (decay_type == "cosine") decay_type_ = Decay::cosine;
  else fail("LRScheduler: lr_scheduler.decay_type '{}' is not known (expected linear, sqrt or cosine)",
            decay_type);
  // torchtitan/components/lr_scheduler.py build_lr_schedulers.
  warmup_ = std::min(cfg.warmup_steps, total_steps);
  if (decay_ratio >= 0.0) {
    decay_ = static_cast<int64_t>(std::nearbyint(static_cast<double>(total_steps) * decay_ratio));
    decay_ = std::min(decay_, total_steps - warmup_);
  } else {
    decay_ = total_steps - warmup_;
  }
  stable_ = total_steps + 1 - warmup_ - decay_;
}

double LRScheduler::wsd_multiplier(int64_t k, double m) const {
  // torchtitan linear_warmup_stable_decay (0-based step, hence the +1s).
  if (k < warmup_) return static_cast<double>(k + 1) / static_cast<double>(warmup_);
  const int64_t warmup_stable = warmup_ + stable_;
  if (k < warmup_stable || decay_ == 0) return 1.0;
  // Past the last training step the floor holds (TorchTitan would extrapolate below it).
  const double progress = std::min(
      1.0, static_cast<double>(k + 1 - warmup_stable) / static_cast<double>(decay_));
  double adj = 0.0;
  switch (decay_type_) {
    case Decay::linear: adj = 1 - progress; break;
    case Decay::sqrt: adj = 1 - std::sqrt(progress); break;
    case Decay::cosine: adj = 0.5 * (1.0 + std::cos(std::numbers::pi * progress)); break;
  }
  return m + (1 - m) * adj;
}

double LRScheduler::lr(int64_t step, double base_lr) const {
  TITAN_CHECK(step >= 0, "LRScheduler::lr: step must be >= 0, got {}", step);
  if (kind_ == Kind::warmup_cosine) {
    // nanoGPT train.py get_lr(it), operation for operation.
    const double min_lr = cfg_.min_lr >= 0.0 ? cfg_.min_lr : base_lr * cfg_.min_lr_factor;
    if (step < warmup_)
      return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_ + 1);
    if (step > decay_iters_) return min_lr;
    const double ratio =
        static_cast<double>(step - warmup_) / static_cast<double>(decay_iters_ - warmup_);
    const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
    return min_lr + coeff * (base_lr - min_lr);
  }
  double m = cfg_.min_lr_factor;
  if (cfg_.min_lr >= 0.0) m = base_lr > 0.0 ? cfg_.min_lr / base_lr : 0.0;
  return base_lr * wsd_multiplier(step, m);
}

void LRScheduler::apply(Optimizer& opt, int64_t step) const {
  for (size_t g = 0; g < opt.groups().size(); ++g) opt.set_lr(g, lr(step, opt.groups()[g].base_lr));
}

}  // namespace titan::optim
