// Reverse-mode autograd graph (DESIGN.md §1.3). Every differentiable op creates one
// Node that holds what its backward needs; outputs point at it (grad_fn), and the
// node points at its inputs' nodes (next edges). Leaves that require grad get an
// AccumulateGrad node. Nodes are numbered (seq) when record() wires them, after the
// edges to their inputs exist (including a leaf's lazily created AccumulateGrad); the
// engine runs them in descending seq, which is therefore a topological order and is
// the same on every run.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::autograd {

struct Node;

// Where the gradient of one op input goes: (node, which output of that node).
struct Edge {
  std::shared_ptr<Node> fn;  // null: the input needs no gradient
  int input_nr = 0;
};

struct Node : std::enable_shared_from_this<Node> {
  Node();
  virtual ~Node() = default;
  // grads[i] is the gradient of output i (always defined; zeros if unused).
  // Returns one gradient per input edge (undefined where the input needs none).
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grads) = 0;
  virtual std::string name() const = 0;
  // Drops saved tensors after backward (the graph is single-use).
  virtual void release() {}

  uint64_t seq;
  std::vector<Edge> next;
  // Shape/dtype of each output and each input, for checks and zero-filling.
  std::vector<Shape> out_shapes;
  std::vector<DType> out_dtypes;
  std::vector<Shape> in_shapes;
};

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;           // null for leaves
  int output_nr = 0;
  std::shared_ptr<Node> grad_accumulator;  // leaves only, created lazily
};

// Leaf gradient sink: grad += incoming (or set when absent), in arrival order.
struct AccumulateGrad final : Node {
  explicit AccumulateGrad(std::weak_ptr<TensorImpl> leaf) : leaf(std::move(leaf)) {}
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  std::string name() const override { return "AccumulateGrad"; }
  std::weak_ptr<TensorImpl> leaf;
};

// Thread-local switch: when disabled, ops record nothing.
struct GradMode {
  static bool enabled();
  static void set_enabled(bool on);
};

class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;
 private:
  bool prev_;
};

class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(GradMode::enabled()) { GradMode::set_enabled(true); }
  ~EnableGradGuard() { GradMode::set_enabled(prev_); }
 private:
  bool prev_;
};

// The edge a gradient for tensor t should flow to (creates the leaf accumulator).
Edge gradient_edge(const Tensor& t);

// True if grad mode is on and any input requires grad.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
bool needs_grad(const std::vector<Tensor>& inputs);

// Wires `node` as grad_fn of `outputs` with edges to `inputs`. Call only when
// needs_grad(inputs). Records shapes for checks.
void record(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs,
            const std::vector<Tensor>& outputs);

// Runs backward from `roots` with seed gradients `grads` (same shapes). Gradients of
// leaves are accumulated into their .grad(). With `inputs` given, instead returns
// the gradients w.r.t. those tensors (leaves' .grad() untouched), as torch.autograd.grad.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads);
std::vector<Tensor> grad(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                         const std::vector<Tensor>& inputs);

// A node that throws when backward reaches it: for ops without a derivative.
struct NotDifferentiable final : Node {
  explicit NotDifferentiable(std::string op) : op(std::move(op)) {}
  std::vector<Tensor> apply(std::vector<Tensor>&&) override;
  std::string name() const override { return op; }
  std::string op;
};

}  // namespace titan::autograd
