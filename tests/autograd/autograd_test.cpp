// Autograd engine + op library together: a composite graph vs PyTorch, bitwise
// determinism (run to run and across thread counts), activation checkpointing
// (bitwise equal gradients), leaf accumulation, and autograd error messages.
#include <gtest/gtest.h>

#include <cstring>

#include "tests/util/torch_ref.h"
#include "titan/autograd/checkpoint.h"
#include "titan/autograd/node.h"
#include "titan/core/thread_pool.h"
#include "titan/ops/ops.h"

namespace titan {
namespace {

using test::randint;
using test::randn;

std::string what(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A small decoder-like graph: embedding → rms_norm → q/k/v → rope → attention → o-proj
// residual → rms_norm → SwiGLU MLP residual → fused linear cross-entropy with z-loss.
struct Params {
  Tensor emb, n1, wq, wk, wv, wo, n2, w1, w3, w2, head;
  std::vector<Tensor> all() const { return {emb, n1, wq, wk, wv, wo, n2, w1, w3, w2, head}; }
};

Params make_params() {
  const int64_t V = 37, D = 32, F = 48;
  Params p;
  uint64_t s = 10;
  p.emb = randn({V, D}, s++);
  p.n1 = randn({D}, s++, 0.1);
  p.wq = randn({4 * 8, D}, s++, 0.2);
  p.wk = randn({2 * 8, D}, s++, 0.2);
  p.wv = randn({2 * 8, D}, s++, 0.2);
  p.wo = randn({D, 4 * 8}, s++, 0.2);
  p.n2 = randn({D}, s++, 0.1);
  p.w1 = randn({F, D}, s++, 0.2);
  p.w3 = randn({F, D}, s++, 0.2);
  p.w2 = randn({D, F}, s++, 0.2);
  p.head = randn({V, D}, s++, 0.2);
  for (auto* t : {&p.n1, &p.n2}) {  // weights near 1
    float* d = t->data<float>();
    for (int64_t i = 0; i < t->numel(); ++i) d[i] += 1.0f;
  }
  for (auto& t : p.all()) t.requires_grad_();
  return p;
}

Tensor mlp(const Params& p, const Tensor& h) {
  Tensor x = rms_norm(h, p.n2, 1e-6);
  return add(h, linear(swiglu(linear(x, p.w1), linear(x, p.w3)), p.w2));
}

Tensor model_loss(const Params& p, bool use_checkpoint) {
  const int64_t T = 21;
  Tensor ids = randint({T}, 37, 99);
  Tensor targets = randint({T}, 37, 98);
  Tensor cu = Tensor::from_vector<int32_t>({0, 9, 21}, {3});
  std::vector<int64_t> pos;
  for (int64_t t = 0; t < T; ++t) pos.push_back(t < 9 ? t : t - 9);
  Tensor positions = Tensor::from_vector(pos, {T});
  static const RopeCache rc = rope_cache(64, 8, 10000.0);
  Tensor h = embedding(p.emb, ids);
  Tensor x = rms_norm(h, p.n1, 1e-6);
  Tensor q = linear(x, p.wq).view({T, 4, 8}), k = linear(x, p.wk).view({T, 2, 8});
  Tensor v = linear(x, p.wv).view({T, 2, 8});
  auto [qr, kr] = apply_rotary(q, k, positions, rc);
  Tensor a = scaled_dot_product_attention_varlen(qr, kr, v, cu);
  h = add(h, linear(a.view({T, 32}), p.wo));
  if (use_checkpoint)
    h = autograd::checkpoint([&p](const std::vector<Tensor>& in) { return std::vector<Tensor>{mlp(p, in[0])}; },
                             {h})[0];
  else
    h = mlp(p, h);
  return linear_cross_entropy(h, p.head, targets, -100, 1e-3);
}

std::vector<std::vector<float>> grads_of(const Params& p) {
  std::vector<std::vector<float>> g;
  for (auto& t : p.all()) g.push_back(t.grad().to_vector<float>());
  return g;
}

void expect_bitwise(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size());
    EXPECT_EQ(std::memcmp(a[i].data(), b[i].data(), a[i].size() * 4), 0) << "parameter " << i;
  }
}

TEST(Autograd, CompositeGraphIsBitwiseDeterministic) {
  Params p1 = make_params();
  Tensor l1 = model_loss(p1, false);
  l1.backward();
  Params p2 = make_params();
  Tensor l2 = model_loss(p2, false);
  l2.backward();
  EXPECT_EQ(l1.item<float>(), l2.item<float>());
  expect_bitwise(grads_of(p1), grads_of(p2));
  for (auto& g : grads_of(p1)) {  // every parameter got a real gradient
    double n = 0;
    for (float v : g) n += std::fabs(v);
    EXPECT_GT(n, 0.0);
  }
  // Same bits with one thread.
  const int prev = num_threads();
  set_num_threads(1);
  Params p3 = make_params();
  model_loss(p3, false).backward();
  set_num_threads(prev);
  expect_bitwise(grads_of(p1), grads_of(p3));
}

TEST(Autograd, CheckpointGivesBitwiseEqualGradients) {
  Params a = make_params(), b = make_params();
  Tensor la = model_loss(a, false), lb = model_loss(b, true);
  EXPECT_EQ(la.item<float>(), lb.item<float>());
  la.backward();
  lb.backward();
  expect_bitwise(grads_of(a), grads_of(b));
}

TEST(Autograd, CompositeMatchesTorch) {
  // (silu(x·w1ᵀ) ⊙ x·w3ᵀ)·w2ᵀ squared and averaged, vs PyTorch.
  std::vector<test::OpCheck> cs(1);
  auto& c = cs[0];
  c.ref.op = "mlp_block";
  c.ref.inputs = {{"x", randn({7, 16}, 1)}, {"w1", randn({24, 16}, 2, 0.3)},
                  {"w3", randn({24, 16}, 3, 0.3)}, {"w2", randn({16, 24}, 4, 0.3)}};
  c.ref.grad_of = {"x", "w1", "w3", "w2"};
  c.fn = [](auto& in) {
    Tensor h = swiglu(linear(in[0], in[1]), linear(in[0], in[2]));
    return std::vector<Tensor>{mean(square(linear(h, in[3])))};
  };
  c.tol = c.grad_tol = {1e-5, 1e-6};
  test::check_ops(cs);
}

TEST(Autograd, LeafUsedSeveralTimesAccumulates) {
  // The first op on a fresh leaf creates its accumulator: its gradient must not be lost.
  Tensor x = Tensor::from_vector<float>({1, 2, 3}, {3}).requires_grad_();
  sum(add(mul(x, x), x)).backward();  // d/dx (x² + x) = 2x + 1
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{3, 5, 7}));
  sum(x).backward();  // accumulates into .grad
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{4, 6, 8}));
}

TEST(Autograd, Errors) {
  EXPECT_NE(what([] { Tensor::ones({1}).backward(); }).find("backward: root 0 (shape [1], dtype f32) does not require grad"),
            std::string::npos);
  Tensor x = randn({4, 5}, 1).requires_grad_();
  const std::string e1 = what([&] { argmax(x, 1).backward(Tensor::ones({4})); });
  EXPECT_NE(e1.find("dtype i64) does not require grad"), std::string::npos) << e1;
  EXPECT_NE(e1.find("non-differentiable"), std::string::npos) << e1;
  const std::string e2 = what([&] { topk(x, 2).indices.backward(Tensor::ones({4, 2})); });
  EXPECT_NE(e2.find("does not require grad"), std::string::npos) << e2;
  Tensor y = sum(square(x));
  y.backward();
  EXPECT_NE(what([&] { y.backward(); }).find("a second time"), std::string::npos);
  EXPECT_NE(what([&] { square(x).backward(); }).find("implicit gradient only for 1-element tensors"),
            std::string::npos);
  EXPECT_NE(what([&] { square(x).backward(Tensor::ones({5, 4})); }).find("gradient 0 has shape [5, 4], expected [4, 5]"),
            std::string::npos);
  {
    autograd::NoGradGuard ng;
    EXPECT_FALSE(square(x).requires_grad());
  }
  EXPECT_NE(what([] { Tensor::zeros({2}, DType::i64).requires_grad_(); }).find("only floating tensors"),
            std::string::npos);
}

}  // namespace
}  // namespace titan
