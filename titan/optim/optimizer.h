// The trainer's optimizer: one object updating every parameter, AdamW alone
// (name "adamw") or Muon on the 2-D hidden matrices with AdamW on everything else
// (name "muon", as Keller Jordan's MuonWithAuxAdam and TorchTitan's Kimi recipes).
// fp32 master weights and fp32 state (DESIGN.md §1.4). Parameters are visited in the
// order given; every update is elementwise or a fixed-order GEMM, so the bits never
// depend on the thread count.
//
// Parameter groups (created only when non-empty, in this order):
//   "adamw_decay"    AdamW, weight_decay = cfg.weight_decay
//   "adamw_no_decay" AdamW, weight_decay = 0 (kinds excluded by the decay rules)
//   "muon"           Muon, lr = cfg.muon_lr (0: cfg.lr), weight_decay = cfg.weight_decay
//
// Optimizer state as named tensors (state_dict / load_state_dict), for safetensors:
//   "step"                       i64 [] number of step() calls
//   "<param>.step"               i64 [] updates this parameter received (torch's state['step'])
//   "<param>.exp_avg"            f32, param shape (AdamW)
//   "<param>.exp_avg_sq"         f32, param shape (AdamW)
//   "<param>.momentum_buffer"    f32, param shape (Muon)
// A parameter that never had a gradient has no state and no keys (as in torch).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "titan/core/tensor.h"
#include "titan/optim/adamw.h"
#include "titan/optim/muon.h"
#include "titan/optim/param_groups.h"

namespace titan::optim {

struct OptimizerConfig {
  std::string name = "adamw";  // adamw | muon (case-insensitive)
  double lr = 8e-4;            // TorchTitan default_adamw
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  WeightDecayRules decay;      // which kinds decay (norms/biases/embeddings off by default)
  // Muon (name == "muon"); Keller Jordan's reference defaults.
  double muon_lr = 0.0;        // 0: use lr (natural with match_rms_adamw; the reference uses 0.02)
  double muon_momentum = 0.95;
  bool muon_nesterov = true;
  int muon_ns_steps = 5;
  std::string muon_adjust_lr = "original";  // original | match_rms_adamw
};

enum class UpdateRule { adamw, muon };

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Optimizer {
 public:
  struct Group {
    std::string name;
    UpdateRule rule;
    double base_lr;       // the peak lr the schedule scales
    double lr;            // the lr of the next step
    double weight_decay;
    std::vector<size_t> params;  // indices into params()
  };
  struct Param {
    ParamRef ref;
    ParamKind kind;
    UpdateRule rule;
    size_t group;
    int64_t step = 0;     // updates received
    Tensor exp_avg, exp_avg_sq, momentum_buffer;  // undefined until the first update
  };

  // Throws titan::Error on an unknown cfg.name / muon_adjust_lr, invalid
  // hyperparameters, or a parameter that is undefined, not fp32, not contiguous, or
  // has an empty or duplicate name.
  Optimizer(std::vector<ParamRef> params, const OptimizerConfig& cfg);

  // One update of every parameter that has a gradient (others are skipped and keep
  // their state, as torch). All gradients are checked before anything changes: a
  // gradient that is not fp32 or whose shape differs from its parameter's throws
  // titan::Error naming the parameter.
  void step();
  // zero_grad over all parameters (titan/optim/grad_clip.h).
  void zero_grad(bool set_to_none = true);

  const std::vector<Group>& groups() const { return groups_; }
  void set_lr(size_t group, double lr);
  const std::vector<Param>& params() const { return params_; }
  std::vector<ParamRef> param_refs() const;
  const OptimizerConfig& config() const { return cfg_; }
  int64_t num_steps() const { return num_steps_; }

  // The state as named tensors (see the header comment), in parameter order. The
  // f32 tensors share storage with the live state: clone them (or finish writing)
  // before the next step().
  NamedTensors state_dict() const;
  // Restores a state_dict (values copied). Strict: every key must be known, shapes
  // and dtypes must match, a parameter's keys must be all present or all absent
  // ("step" is required); nothing changes when it throws titan::Error. After loading,
  // the next step() is bitwise identical to that of an uninterrupted run.
  void load_state_dict(const NamedTensors& state);

 private:
  OptimizerConfig cfg_;
  AdamWHyper adamw_;  // lr/weight_decay set per group at step time
  MuonHyper muon_;
  std::vector<Param> params_;
  std::vector<Group> groups_;
  int64_t num_steps_ = 0;
  MuonWorkspace ws_;
};

}  // namespace titan::optim
