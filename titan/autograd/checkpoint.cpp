#include "titan/autograd/checkpoint.h"

#include "titan/autograd/function.h"

namespace titan::autograd {

std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs) {
  if (!GradMode::enabled()) return fn(inputs);
  std::vector<Tensor> outputs;
  {
    NoGradGuard ng;
    outputs = fn(inputs);
  }
  // Outputs must be fresh tensors we can attach a node to.
  for (auto& o : outputs) o = o.detach();
  // Parameters used inside fn are not in `inputs`, so record even when no input requires grad.
  record_fn("Checkpoint", inputs, outputs, [fn, inputs](const std::vector<Tensor>& grads) {
    std::vector<Tensor> det;
    for (auto& x : inputs) {
      Tensor d = x.detach();
      if (x.requires_grad()) d.requires_grad_(true);
      det.push_back(d);
    }
    std::vector<Tensor> outs;
    {
      EnableGradGuard eg;
      outs = fn(det);
    }
    std::vector<Tensor> roots, seeds;
    for (size_t i = 0; i < outs.size(); ++i)
      if (outs[i].requires_grad()) {
        roots.push_back(outs[i]);
        seeds.push_back(grads[i]);
      }
    if (!roots.empty()) backward(roots, seeds);
    std::vector<Tensor> res;
    for (auto& d : det) res.push_back(d.requires_grad() ? d.grad() : Tensor());
    return res;
  });
  return outputs;
}

}  // namespace titan::autograd
