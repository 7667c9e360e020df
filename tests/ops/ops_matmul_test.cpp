// matmul / linear vs PyTorch (float64 reference on the same, bf16-rounded where
// applicable, operand values), and batch invariance of rows.
#include <gtest/gtest.h>

#include <cstring>

#include "tests/util/torch_ref.h"
#include "titan/autograd/node.h"
#include "titan/ops/matmul.h"

namespace titan {
namespace {

using test::check_ops;
using test::OpCheck;
using test::randn;

// f32 tolerance: K <= 65 products of N(0,1) values accumulate ~sqrt(K) ulps.
const test::Tol kTol{1e-5, 1e-5};

TEST(Matmul, MatchesTorch) {
  std::vector<OpCheck> cs;
  uint64_t seed = 300;
  struct MKN { int64_t m, k, n; };
  for (MKN s : {MKN{1, 1, 1}, MKN{3, 17, 5}, MKN{17, 33, 9}, MKN{33, 65, 17}, MKN{2, 8, 1}}) {
    for (bool bf16 : {false, true}) {
      OpCheck c;
      c.ref.op = "matmul";
      c.ref.label = fmt::format("matmul {}x{}x{} bf16={}", s.m, s.k, s.n, bf16);
      Tensor b = randn({s.k, s.n}, seed++);
      c.ref.inputs = {{"a", randn({s.m, s.k}, seed++)}, {"b", bf16 ? b.to(DType::bf16) : b}};
      c.ref.grad_of = {"a", "b"};
      c.fn = [](auto& in) { return std::vector<Tensor>{matmul(in[0], in[1])}; };
      c.tol = c.grad_tol = kTol;
      cs.push_back(c);
    }
    // Batched 3-D · 3-D and 3-D · 2-D.
    OpCheck c;
    c.ref.op = "matmul";
    c.ref.label = fmt::format("bmm 3x{}x{}x{}", s.m, s.k, s.n);
    c.ref.inputs = {{"a", randn({3, s.m, s.k}, seed++)}, {"b", randn({3, s.k, s.n}, seed++)}};
    c.ref.grad_of = {"a", "b"};
    c.fn = [](auto& in) { return std::vector<Tensor>{matmul(in[0], in[1])}; };
    c.tol = c.grad_tol = kTol;
    cs.push_back(c);
    c.ref.label = fmt::format("3d@2d 2x{}x{}x{}", s.m, s.k, s.n);
    c.ref.inputs = {{"a", randn({2, s.m, s.k}, seed++)}, {"b", randn({s.k, s.n}, seed++)}};
    cs.push_back(c);
  }
  for (Shape xs : {Shape{7}, Shape{5, 17}, Shape{2, 3, 33}}) {
    const int64_t in = xs.back();
    for (int64_t outf : {1, 9, 40})
      for (int variant = 0; variant < 3; ++variant) {  // 0: f32 no bias, 1: f32 bias, 2: bf16 w + bias
        OpCheck c;
        c.ref.op = "linear";
        c.ref.label = fmt::format("linear x{} out={} variant={}", shape_str(xs), outf, variant);
        Tensor w = randn({outf, in}, seed++, 0.3);
        c.ref.inputs = {{"x", randn(xs, seed++)}, {"w", variant == 2 ? w.to(DType::bf16) : w}};
        c.ref.grad_of = {"x", "w"};
        if (variant > 0) {
          c.ref.inputs.push_back({"b", randn({outf}, seed++)});
          c.ref.grad_of.push_back("b");
        }
        c.fn = [](auto& in) {
          return std::vector<Tensor>{linear(in[0], in[1], in.size() > 2 ? in[2] : Tensor())};
        };
        c.tol = c.grad_tol = kTol;
        cs.push_back(c);
      }
  }
  check_ops(cs);
}

TEST(Matmul, RowsAreBatchInvariant) {
  // Row 5 of linear(x) equals linear(x[5:6]) bit for bit, in batches of 1, 7 and 64 rows.
  Tensor w = randn({37, 65}, 1);
  Tensor x = randn({64, 65}, 2);
  auto full = linear(x, w).to_vector<float>();
  for (int64_t rows : {1, 7, 64}) {
    const int64_t start = rows == 1 ? 5 : 0;
    auto part = linear(x.narrow(0, start, rows), w).to_vector<float>();
    EXPECT_EQ(std::memcmp(part.data() + (5 - start) * 37, full.data() + 5 * 37, 37 * 4), 0) << rows;
  }
}

TEST(Matmul, LinearPanelsEqualsLinear) {
  // The weight repacked into GEMM panels (37 outputs: a zero-padded last panel) gives
  // linear's bits, with and without bias, for decode, medium and prefill row counts.
  autograd::NoGradGuard ng;
  Tensor w = randn({37, 65}, 3), bias = randn({37}, 4);
  Tensor panels = repack_linear_weight(w);
  const int64_t pw = panels.size(2);
  EXPECT_EQ(panels.shape(), (Shape{(37 + pw - 1) / pw, 65, pw}));
  for (int64_t rows : {1, 5, 30, 300}) {
    Tensor x = randn({rows, 65}, 10 + rows);
    for (bool with_bias : {false, true}) {
      const Tensor b = with_bias ? bias : Tensor();
      auto want = linear(x, w, b).to_vector<float>(),
           got = linear_panels(x, panels, 37, b).to_vector<float>();
      ASSERT_EQ(want.size(), got.size());
      EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * 4), 0)
          << rows << " bias=" << with_bias;
    }
  }
}

TEST(Matmul, LinearPanelsErrors) {
  Tensor panels = repack_linear_weight(randn({37, 65}, 3));
  Tensor x = randn({2, 65}, 5);
  x.requires_grad_(true);
  try {
    linear_panels(x, panels, 37);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("linear_panels: no backward"), std::string::npos)
        << e.what();
  }
  autograd::NoGradGuard ng;
  EXPECT_THROW(linear_panels(Tensor::zeros({2, 64}), panels, 37), Error);   // inputs differ
  EXPECT_THROW(linear_panels(Tensor::zeros({2, 65}), panels, 100), Error);  // panel count
  EXPECT_THROW(linear_panels(Tensor::zeros({2, 65}), randn({37, 65}, 1), 37),
               Error);  // not repacked
  EXPECT_THROW(repack_linear_weight(Tensor::zeros({2, 3, 4})), Error);
}

TEST(Matmul, Errors) {
  try {
    matmul(Tensor::zeros({2, 3}), Tensor::zeros({4, 5}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("matmul: inner sizes differ"), std::string::npos) << e.what();
  }
  try {
    linear(Tensor::zeros({2, 3}), Tensor::zeros({4, 5}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("linear: x has shape [2, 3] but w has shape [4, 5]"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(linear(Tensor::zeros({2, 3}), Tensor::zeros({4, 3}), Tensor::zeros({3})), Error);
  EXPECT_THROW(matmul(Tensor::zeros({2, 3}, DType::i64), Tensor::zeros({3, 2})), Error);
  EXPECT_THROW(matmul(Tensor::zeros({2, 2, 3}), Tensor::zeros({3, 3, 2})), Error);
}

}  // namespace
}  // namespace titan
