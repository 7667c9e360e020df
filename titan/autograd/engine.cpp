// The backward engine: deterministic reverse traversal in descending node seq.
#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "titan/autograd/node.h"
#include "titan/core/thread_pool.h"

namespace titan::autograd {

namespace {
std::atomic<uint64_t> g_next_seq{1};
thread_local bool tl_grad_enabled = true;

// dst += src for same-shape f32 tensors; returns the sum (dst reused when contiguous & owned).
Tensor accumulate(Tensor dst, const Tensor& src) {
  if (!dst.defined()) return src;
  TITAN_CHECK(dst.shape() == src.shape(), "autograd: cannot accumulate gradient of shape {} into {}",
              shape_str(src.shape()), shape_str(dst.shape()));
  TITAN_CHECK(dst.dtype() == DType::f32 && src.dtype() == DType::f32,
              "autograd: gradients must be f32, got {} and {}", dtype_name(dst.dtype()),
              dtype_name(src.dtype()));
  Tensor out = Tensor::empty(dst.shape());
  Tensor a = dst.contiguous(), b = src.contiguous();
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
  const int64_t n = out.numel();
  parallel_for_grain(n, 1 << 16, [&](int64_t b0, int64_t e0) {
    for (int64_t i = b0; i < e0; ++i) po[i] = pa[i] + pb[i];
  });
  return out;
}

struct EdgeKey {
  Node* fn;
  int nr;
  bool operator<(const EdgeKey& o) const { return fn != o.fn ? fn < o.fn : nr < o.nr; }
};

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& seeds,
                  const std::vector<Tensor>* inputs, std::vector<Tensor>* captured) {
  TITAN_CHECK(roots.size() == seeds.size(), "backward: {} roots but {} gradients", roots.size(),
              seeds.size());
  NoGradGuard no_grad;
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  std::vector<std::shared_ptr<Node>> order;
  std::unordered_set<Node*> seen;
  std::vector<std::shared_ptr<Node>> stack;

  auto add_grad = [&](const Edge& e, const Tensor& g) {
    auto& buf = buffers[e.fn.get()];
    if (buf.size() < e.fn->out_shapes.size()) buf.resize(e.fn->out_shapes.size());
    buf[e.input_nr] = accumulate(buf[e.input_nr], g);
  };

  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    TITAN_CHECK(r.requires_grad(),
                "backward: root {} (shape {}, dtype {}) does not require grad and has no grad_fn; "
                "was it produced by a non-differentiable op (e.g. integer indices of argmax/topk) "
                "or under NoGradGuard?",
                i, shape_str(r.shape()), dtype_name(r.dtype()));
    Tensor g = seeds[i];
    TITAN_CHECK(g.shape() == r.shape(), "backward: gradient {} has shape {}, expected {}", i,
                shape_str(g.shape()), shape_str(r.shape()));
    Edge e = gradient_edge(r);
    if (!seen.count(e.fn.get())) {
      seen.insert(e.fn.get());
      stack.push_back(e.fn);
    }
    add_grad(e, g.dtype() == DType::f32 ? g : g.to(DType::f32));
  }
  while (!stack.empty()) {
    auto n = stack.back();
    stack.pop_back();
    order.push_back(n);
    for (auto& e : n->next)
      if (e.fn && !seen.count(e.fn.get())) {
        seen.insert(e.fn.get());
        stack.push_back(e.fn);
      }
  }
  std::sort(order.begin(), order.end(), [](auto& a, auto& b) { return a->seq > b->seq; });

  std::map<EdgeKey, size_t> capture_idx;
  if (inputs) {
    captured->assign(inputs->size(), Tensor());
    for (size_t i = 0; i < inputs->size(); ++i) {
      TITAN_CHECK((*inputs)[i].requires_grad(), "grad: input {} does not require grad", i);
      Edge e = gradient_edge((*inputs)[i]);
      capture_idx[{e.fn.get(), e.input_nr}] = i;
    }
  }

  for (auto& node : order) {
    auto it = buffers.find(node.get());
    if (it == buffers.end()) continue;
    std::vector<Tensor> grads = std::move(it->second);
    buffers.erase(it);
    grads.resize(node->out_shapes.size());
    for (size_t k = 0; k < grads.size(); ++k)
      if (!grads[k].defined()) grads[k] = Tensor::zeros(node->out_shapes[k]);
    bool is_acc = dynamic_cast<AccumulateGrad*>(node.get()) != nullptr;
    if (inputs) {
      for (size_t k = 0; k < grads.size(); ++k) {
        auto c = capture_idx.find({node.get(), static_cast<int>(k)});
        if (c != capture_idx.end()) (*captured)[c->second] = grads[k];
      }
      if (is_acc) continue;  // grad(): leaves' .grad untouched
    }
    std::vector<Tensor> out = node->apply(std::move(grads));
    TITAN_CHECK(out.size() == node->next.size(), "backward of {} returned {} gradients for {} inputs",
                node->name(), out.size(), node->next.size());
    for (size_t i = 0; i < out.size(); ++i) {
      const Edge& e = node->next[i];
      if (!e.fn || !out[i].defined()) continue;
      TITAN_CHECK(out[i].shape() == node->in_shapes[i],
                  "backward of {} returned gradient of shape {} for input {}, expected {}",
                  node->name(), shape_str(out[i].shape()), i, shape_str(node->in_shapes[i]));
      add_grad(e, out[i]);
    }
    if (!is_acc) node->release();
  }
}
}  // namespace

Node::Node() : seq(g_next_seq.fetch_add(1)) {}

bool GradMode::enabled() { return tl_grad_enabled; }
void GradMode::set_enabled(bool on) { tl_grad_enabled = on; }

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grads) {
  auto impl = leaf.lock();
  if (!impl) return {};
  Tensor t(impl);
  Tensor g = t.grad();
  if (!g.defined()) {
    t.set_grad(grads[0].clone());
  } else {
    // In place, so gradient accumulation over micro-batches keeps one buffer.
    TITAN_CHECK(g.shape() == grads[0].shape() && g.is_contiguous() && g.dtype() == DType::f32,
                "AccumulateGrad: existing .grad has shape {}, incoming {}", shape_str(g.shape()),
                shape_str(grads[0].shape()));
    Tensor src = grads[0].contiguous();
    float* pg = g.data<float>();
    const float* ps = src.data<float>();
    const int64_t n = g.numel();
    parallel_for_grain(n, 1 << 16, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) pg[i] += ps[i];
    });
  }
  return {};
}

std::vector<Tensor> NotDifferentiable::apply(std::vector<Tensor>&&) {
  fail("backward through '{}' is not supported: the op is not differentiable", op);
}

Edge gradient_edge(const Tensor& t) {
  auto* meta = t.unsafe_impl()->autograd.get();
  TITAN_CHECK(meta != nullptr, "autograd: tensor has no autograd state");
  if (meta->grad_fn) return {meta->grad_fn, meta->output_nr};
  if (!meta->requires_grad) return {};
  if (!meta->grad_accumulator) {
    auto acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    acc->out_shapes = {t.shape()};
    acc->out_dtypes = {DType::f32};
    meta->grad_accumulator = acc;
  }
  return {meta->grad_accumulator, 0};
}

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!GradMode::enabled()) return false;
  for (auto* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!GradMode::enabled()) return false;
  for (auto& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void record(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs,
            const std::vector<Tensor>& outputs) {
  node->next.clear();
  node->in_shapes.clear();
  for (auto& t : inputs) {
    if (t.defined() && t.requires_grad()) node->next.push_back(gradient_edge(t));
    else node->next.push_back({});
    node->in_shapes.push_back(t.defined() ? t.shape() : Shape{});
  }
  // Number the node only now: gradient_edge() may just have created a leaf's
  // AccumulateGrad, which must get a smaller seq than this node so that the
  // descending-seq order runs it after every consumer of the leaf.
  node->seq = g_next_seq.fetch_add(1);
  node->out_shapes.clear();
  node->out_dtypes.clear();
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& o = outputs[i];
    node->out_shapes.push_back(o.shape());
    node->out_dtypes.push_back(o.dtype());
    auto& meta = o.unsafe_impl()->autograd;
    if (!meta) meta = std::make_unique<AutogradMeta>();
    meta->requires_grad = true;
    meta->grad_fn = node;
    meta->output_nr = static_cast<int>(i);
  }
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads) {
  run_backward(roots, grads, nullptr, nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                         const std::vector<Tensor>& inputs) {
  std::vector<Tensor> out;
  run_backward(roots, grads, &inputs, &out);
  for (size_t i = 0; i < out.size(); ++i)
    if (!out[i].defined()) out[i] = Tensor::zeros(inputs[i].shape());
  return out;
}

}  // namespace titan::autograd
