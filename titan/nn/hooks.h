// Forward hooks on modules (torch.nn.Module.register_forward_pre_hook and
// register_forward_hook): a caller that runs a module's forward through
// call_forward(m, fn) lets a hook act before (pre_forward) and after (post_forward,
// which may replace the output, e.g. by a tensor with an extra autograd node).
// Decoder runs the embedding and each transformer block this way, and a block its norms,
// mixer and feed-forward; FSDP (titan/distributed/fsdp.h)
// gathers a block's parameters in pre_forward and frees them in post_forward.
#pragma once
#include <functional>
#include <memory>

#include "titan/core/tensor.h"
#include "titan/nn/module.h"

namespace titan::nn {

class ForwardHook {
 public:
  virtual ~ForwardHook() = default;
  virtual void pre_forward(const Module& m) = 0;
  virtual Tensor post_forward(const Module& m, Tensor output) = 0;
};

// Installs (or with nullptr removes) the hook of module m; at most one per module.
// The caller keeps m alive while the hook is set.
void set_forward_hook(const Module& m, std::shared_ptr<ForwardHook> hook);

// Runs forward() between m's hook's pre_forward and post_forward, or just forward()
// when m has no hook.
Tensor call_forward(const Module& m, const std::function<Tensor()>& forward);

}  // namespace titan::nn
