// Activations, softmax family and norms vs PyTorch (float64 reference), fused vs
// composed twins.
#include <gtest/gtest.h>

#include "tests/util/torch_ref.h"
#include "titan/autograd/node.h"
#include "titan/ops/activation.h"
#include "titan/ops/norm.h"
#include "titan/ops/reduce.h"
#include "titan/ops/softmax.h"

namespace titan {
namespace {

using test::check_ops;
using test::OpCheck;
using test::randn;
using test::Tol;

const std::vector<Shape> kShapes = {{1}, {3}, {17}, {5, 33}, {2, 3, 40}};

OpCheck unary_case(const std::string& op, const Shape& s, uint64_t seed, test::OpFn fn, Tol tol) {
  OpCheck c;
  c.ref.op = op;
  c.ref.label = fmt::format("{}{} seed {}", op, shape_str(s), seed);
  c.ref.inputs = {{"x", randn(s, seed, 3.0)}};
  c.ref.grad_of = {"x"};
  c.fn = std::move(fn);
  c.tol = c.grad_tol = tol;
  return c;
}

TEST(Activation, MatchesTorch) {
  std::vector<OpCheck> cs;
  uint64_t seed = 500;
  const Tol tol{1e-5, 1e-6};
  for (const Shape& s : kShapes) {
    cs.push_back(unary_case("relu", s, seed++, [](auto& in) { return std::vector<Tensor>{relu(in[0])}; }, tol));
    cs.push_back(unary_case("silu", s, seed++, [](auto& in) { return std::vector<Tensor>{silu(in[0])}; }, tol));
    cs.push_back(unary_case("gelu_tanh", s, seed++, [](auto& in) { return std::vector<Tensor>{gelu(in[0])}; }, tol));
    cs.push_back(unary_case("silu", s, seed++, [](auto& in) { return std::vector<Tensor>{composed::silu(in[0])}; }, tol));
    // Composed gelu: 1 + tanh(u) cancels in the negative tail (the kernel uses x·σ(2u)).
    cs.push_back(unary_case("gelu_tanh", s, seed++, [](auto& in) { return std::vector<Tensor>{composed::gelu(in[0])}; }, {1e-5, 5e-6}));
    cs.push_back(unary_case("softmax", s, seed++, [](auto& in) { return std::vector<Tensor>{softmax(in[0])}; }, tol));
    cs.push_back(unary_case("log_softmax", s, seed++, [](auto& in) { return std::vector<Tensor>{log_softmax(in[0])}; }, tol));
    cs.push_back(unary_case("softmax", s, seed++, [](auto& in) { return std::vector<Tensor>{composed::softmax(in[0])}; }, tol));
    cs.push_back(unary_case("log_softmax", s, seed++, [](auto& in) { return std::vector<Tensor>{composed::log_softmax(in[0])}; }, tol));
    for (bool fused : {true, false}) {
      OpCheck c;
      c.ref.op = "swiglu";
      c.ref.label = fmt::format("swiglu{} fused={}", shape_str(s), fused);
      c.ref.inputs = {{"gate", randn(s, seed++, 3.0)}, {"up", randn(s, seed++)}};
      c.ref.grad_of = {"gate", "up"};
      c.fn = [fused](auto& in) {
        return std::vector<Tensor>{fused ? swiglu(in[0], in[1]) : composed::swiglu(in[0], in[1])};
      };
      c.tol = c.grad_tol = tol;
      cs.push_back(c);
    }
  }
  // Softmax over a non-last dim (transposed to last and back).
  {
    OpCheck c = unary_case("logsumexp", {4, 9, 5}, seed++, [](auto& in) {
      return std::vector<Tensor>{logsumexp(in[0], 1, false)};
    }, tol);
    c.ref.attrs = {{"dim", 1}, {"keepdim", false}};
    cs.push_back(c);
  }
  // Norms over the last dim, with and without weight/bias.
  for (Shape s : {Shape{1, 1}, Shape{3, 17}, Shape{2, 5, 64}, Shape{7, 33}}) {
    const int64_t D = s.back();
    for (int variant = 0; variant < 4; ++variant) {
      const bool fused = variant % 2 == 0, weighted = variant < 2;
      OpCheck c;
      c.ref.op = "rms_norm";
      c.ref.label = fmt::format("rms_norm{} fused={} weighted={}", shape_str(s), fused, weighted);
      c.ref.attrs = {{"eps", 1e-6}};
      c.ref.inputs = {{"x", randn(s, seed++, 2.0)}};
      c.ref.grad_of = {"x"};
      if (weighted) {
        c.ref.inputs.push_back({"w", randn({D}, seed++)});
        c.ref.grad_of.push_back("w");
      }
      c.fn = [fused](auto& in) {
        Tensor w = in.size() > 1 ? in[1] : Tensor();
        return std::vector<Tensor>{fused ? rms_norm(in[0], w, 1e-6) : composed::rms_norm(in[0], w, 1e-6)};
      };
      c.tol = {1e-5, 1e-6};
      c.grad_tol = {1e-5, 1e-5};  // dw sums over rows
      cs.push_back(c);
      OpCheck l = c;
      l.ref.op = "layer_norm";
      l.ref.label = fmt::format("layer_norm{} fused={} affine={}", shape_str(s), fused, weighted);
      l.ref.attrs = {{"eps", 1e-5}};
      if (weighted) {
        l.ref.inputs.push_back({"b", randn({D}, seed++)});
        l.ref.grad_of.push_back("b");
      }
      l.fn = [fused](auto& in) {
        Tensor w = in.size() > 1 ? in[1] : Tensor(), b = in.size() > 2 ? in[2] : Tensor();
        return std::vector<Tensor>{fused ? layer_norm(in[0], w, b, 1e-5)
                                         : composed::layer_norm(in[0], w, b, 1e-5)};
      };
      if (D == 1) continue;  // torch's layer_norm of one element: fine, but var = 0 → rstd = 1/sqrt(eps)
      cs.push_back(l);
    }
  }
  check_ops(cs);
}

TEST(Activation, SoftmaxOverOtherDim) {
  Tensor x = randn({4, 6, 3}, 1);
  auto a = softmax(x, 1).contiguous().to_vector<float>();
  auto b = softmax(x.transpose(1, 2).contiguous(), -1).transpose(1, 2).contiguous().to_vector<float>();
  EXPECT_EQ(a, b);
}

TEST(Activation, LogSoftmaxMatchesLogsumexpBits) {
  // log_softmax = x − lse with the same vocabulary algorithm: lse from logsumexp agrees.
  Tensor x = randn({3, 5000}, 2, 4.0);
  auto ls = log_softmax(x).to_vector<float>();
  auto lse = logsumexp(x, -1).to_vector<float>();
  auto xv = x.to_vector<float>();
  for (int t = 0; t < 3; ++t)
    for (int j : {0, 4095, 4096, 4999}) EXPECT_NEAR(ls[t * 5000 + j], xv[t * 5000 + j] - lse[t], 1e-5);
}

TEST(Activation, Errors) {
  try {
    swiglu(Tensor::zeros({2, 3}), Tensor::zeros({2, 4}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("swiglu: gate has shape [2, 3] but up has shape [2, 4]"),
              std::string::npos);
  }
  try {
    rms_norm(Tensor::zeros({2, 3}), Tensor::zeros({4}), 1e-6);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rms_norm: 'w' has shape [4], expected [3]"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(layer_norm(Tensor::zeros({2, 3}), Tensor(), Tensor(), -1.0), Error);
  EXPECT_THROW(silu(Tensor::zeros({2}, DType::bf16)), Error);
  EXPECT_THROW(softmax(Tensor::zeros({2, 0})), Error);
}

}  // namespace
}  // namespace titan
