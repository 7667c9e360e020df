// Helpers for writing differentiable ops.
//
//   Tensor y = <compute forward without recording>;
//   if (autograd::needs_grad({&x, &w}))
//     autograd::record_fn("linear", {x, w}, {y}, [x, w](const std::vector<Tensor>& g) {
//       return std::vector<Tensor>{dx, dw};   // one per input, undefined = no gradient
//     });
//
// The lambda captures what backward needs (saved tensors); captures are dropped after
// backward runs. Backward runs under NoGradGuard (no higher-order gradients).
#pragma once
#include <functional>

#include "titan/autograd/node.h"

namespace titan::autograd {

using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grads)>;

struct FnNode final : Node {
  FnNode(std::string n, BackwardFn f) : name_(std::move(n)), fn(std::move(f)) {}
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    TITAN_CHECK(fn != nullptr, "backward through '{}' a second time: the graph was already freed", name_);
    return fn(grads);
  }
  std::string name() const override { return name_; }
  void release() override { fn = nullptr; }
  std::string name_;
  BackwardFn fn;
};

// Records a node named `name` with backward `fn` for outputs computed from inputs.
inline void record_fn(std::string name, const std::vector<Tensor>& inputs,
                      const std::vector<Tensor>& outputs, BackwardFn fn) {
  record(std::make_shared<FnNode>(std::move(name), std::move(fn)), inputs, outputs);
}

}  // namespace titan::autograd
