// Element-wise ops vs PyTorch (float64 reference): forward and input gradients.
#include <gtest/gtest.h>

#include "tests/util/torch_ref.h"
#include "titan/autograd/node.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/reduce.h"

namespace titan {
namespace {

using test::check_ops;
using test::OpCheck;
using test::randn;
using test::Tol;

const std::vector<Shape> kShapes = {{}, {1}, {3}, {17}, {5, 33}, {2, 3, 7}};

// Positive tensor for log/sqrt/rsqrt/pow: 0.1 + |randn|.
Tensor positive(const Shape& s, uint64_t seed) {
  Tensor t = randn(s, seed);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = 0.1f + std::fabs(p[i]);
  return t;
}

OpCheck unary(const std::string& op, const Shape& s, uint64_t seed, Tensor (*f)(const Tensor&),
              bool pos = false, Tol tol = {}) {
  OpCheck c;
  c.ref.label = op + shape_str(s);
  c.ref.op = op;
  c.ref.inputs = {{"x", pos ? positive(s, seed) : randn(s, seed, 2.0)}};
  c.ref.grad_of = {"x"};
  c.fn = [f](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in[0])}; };
  c.tol = tol;
  c.grad_tol = tol;
  return c;
}

OpCheck binary(const std::string& op, const Shape& sa, const Shape& sb, uint64_t seed,
               Tensor (*f)(const Tensor&, const Tensor&)) {
  OpCheck c;
  c.ref.label = op + shape_str(sa) + shape_str(sb);
  c.ref.op = op;
  Tensor b = op == "div" ? positive(sb, seed + 1) : randn(sb, seed + 1);
  c.ref.inputs = {{"a", randn(sa, seed)}, {"b", b}};
  c.ref.grad_of = {"a", "b"};
  c.fn = [f](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in[0], in[1])}; };
  // A scalar operand's gradient is a sum over the other operand's elements.
  c.grad_tol = {1e-5, 1e-5};
  return c;
}

TEST(Elementwise, MatchesTorch) {
  std::vector<OpCheck> cs;
  uint64_t seed = 1;
  for (const Shape& s : kShapes) {
    cs.push_back(unary("neg", s, seed++, [](const Tensor& x) { return neg(x); }));
    cs.push_back(unary("exp", s, seed++, [](const Tensor& x) { return exp(x); }, false, {2e-6, 1e-7}));
    cs.push_back(unary("log", s, seed++, [](const Tensor& x) { return log(x); }, true));
    cs.push_back(unary("tanh", s, seed++, [](const Tensor& x) { return tanh(x); }, false, {1e-5, 2e-7}));
    cs.push_back(unary("sigmoid", s, seed++, [](const Tensor& x) { return sigmoid(x); }));
    cs.push_back(unary("sqrt", s, seed++, [](const Tensor& x) { return sqrt(x); }, true));
    cs.push_back(unary("rsqrt", s, seed++, [](const Tensor& x) { return rsqrt(x); }, true));
    cs.push_back(unary("square", s, seed++, [](const Tensor& x) { return square(x); }));
    cs.push_back(unary("abs", s, seed++, [](const Tensor& x) { return abs(x); }));
    for (const char* op : {"add", "sub", "mul", "div"}) {
      auto f = std::string(op) == "add"   ? +[](const Tensor& a, const Tensor& b) { return add(a, b); }
               : std::string(op) == "sub" ? +[](const Tensor& a, const Tensor& b) { return sub(a, b); }
               : std::string(op) == "mul" ? +[](const Tensor& a, const Tensor& b) { return mul(a, b); }
                                          : +[](const Tensor& a, const Tensor& b) { return div(a, b); };
      cs.push_back(binary(op, s, s, seed, f));
      cs.push_back(binary(op, s, {}, seed + 7, f));   // 0-d scalar operand
      cs.push_back(binary(op, {1}, s, seed + 9, f));  // 1-element operand on the left
      seed += 11;
    }
  }
  for (double p : {2.0, 0.5, 3.0, -1.5}) {
    OpCheck c = unary("pow", {4, 9}, seed++, nullptr, true);
    c.ref.label = fmt::format("pow {}", p);
    c.ref.attrs = {{"p", p}};
    c.fn = [p](const std::vector<Tensor>& in) { return std::vector<Tensor>{pow(in[0], p)}; };
    cs.push_back(c);
  }
  {
    OpCheck c = unary("scale", {3, 5}, seed++, nullptr);
    c.ref.attrs = {{"s", -0.37}};
    c.fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{scale(in[0], -0.37)}; };
    cs.push_back(c);
    OpCheck d = unary("add_scalar", {3, 5}, seed++, nullptr);
    d.ref.attrs = {{"s", 1.25}};
    d.fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{add(in[0], 1.25)}; };
    cs.push_back(d);
  }
  for (Shape s : {Shape{7}, Shape{4, 17}}) {
    OpCheck c;
    c.ref.op = "where";
    c.ref.label = "where" + shape_str(s);
    Tensor cond = test::randint(s, 2, seed++, DType::boolean);
    c.ref.inputs = {{"cond", cond}, {"a", randn(s, seed++)}, {"b", randn({}, seed++)}};
    c.ref.grad_of = {"a", "b"};
    c.fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{where(in[0], in[1], in[2])}; };
    c.grad_tol = {1e-5, 1e-5};
    cs.push_back(c);
  }
  check_ops(cs);
}

TEST(Elementwise, StridedInputs) {
  // A transposed (non-contiguous) input gives the same values as its contiguous copy.
  Tensor a = randn({5, 7}, 3), b = randn({7, 5}, 4);
  Tensor y = mul(a, b.transpose(0, 1));
  EXPECT_EQ(y.to_vector<float>(), mul(a, b.transpose(0, 1).contiguous()).to_vector<float>());
}

TEST(Elementwise, ExpMatchesSharedVexpBits) {
  // exp and sigmoid/tanh are built on kernels::cpu::exp_f32: equal bits in any batch.
  Tensor x = randn({1000}, 5, 4.0);
  auto full = exp(x).to_vector<float>();
  auto part = exp(x.narrow(0, 3, 13)).to_vector<float>();
  for (int i = 0; i < 13; ++i) EXPECT_EQ(full[3 + i], part[i]);
}

TEST(Elementwise, Errors) {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({3, 2});
  try {
    add(a, b);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("add: shape mismatch: a is [2, 3] and b is [3, 2]"),
              std::string::npos)
        << e.what();
  }
  try {
    mul(a, Tensor::zeros({2, 3}, DType::i64));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mul: argument 'b' must be f32, got i64"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(where(Tensor::zeros({2, 3}), a, a), Error);  // cond must be bool/u8
  Tensor w = Tensor::zeros({3}).requires_grad_();
  try {
    add_(w, Tensor::ones({3}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("add_: in-place ops are not recorded"), std::string::npos);
  }
  {
    autograd::NoGradGuard ng;
    add_(w, Tensor::ones({3}), 2.0);
    scale_(w, 0.5);
    mul_(w, Tensor::full({}, 3.0));
  }
  EXPECT_EQ(w.to_vector<float>(), std::vector<float>(3, 3.0f));
  EXPECT_THROW(add_(Tensor::zeros({3, 2}).transpose(0, 1), Tensor::zeros({2, 3})), Error);
}

}  // namespace
}  // namespace titan
