// cross_entropy / linear_cross_entropy / logprobs vs PyTorch (float64), fused vs
// composed twins, logprob bit-equality, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "tests/util/torch_ref.h"
#include "titan/autograd/node.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/loss.h"
#include "titan/ops/matmul.h"
#include "titan/ops/reduce.h"

namespace titan {
namespace {

using test::check_ops;
using test::OpCheck;
using test::randint;
using test::randn;

const char* red_name(Reduction r) {
  return r == Reduction::none ? "none" : r == Reduction::sum ? "sum" : "mean";
}

// Targets with some rows set to ignore_index.
Tensor targets_with_ignored(int64_t T, int64_t V, uint64_t seed, DType dt) {
  auto v = randint({T}, V, seed).to_vector<int64_t>();
  for (int64_t t = 0; t < T; t += 3) v[t] = -100;
  return Tensor::from_vector(v, {T}, dt);
}

TEST(Loss, MatchesTorch) {
  std::vector<OpCheck> cs;
  uint64_t seed = 1100;
  struct TV { int64_t T, D, V; };
  for (TV s : {TV{1, 8, 5}, TV{7, 16, 33}, TV{13, 24, 4099}}) {
    for (Reduction red : {Reduction::mean, Reduction::sum, Reduction::none}) {
      for (double z : {0.0, 1e-2}) {
        for (int variant = 0; variant < 4; ++variant) {
          // 0: cross_entropy, 1: composed::cross_entropy, 2: linear_cross_entropy,
          // 3: composed::linear_cross_entropy
          if (s.T == 1 && variant < 2) continue;
          OpCheck c;
          c.ref.op = "cross_entropy";
          c.ref.label = fmt::format("ce T{} V{} {} z={} variant {}", s.T, s.V, red_name(red), z, variant);
          c.ref.attrs = {{"ignore_index", -100}, {"z_loss", z}, {"reduction", red_name(red)}};
          Tensor y = s.T == 1 ? randint({1}, s.V, seed++) : targets_with_ignored(s.T, s.V, seed++,
                                                                                 variant % 2 ? DType::i64 : DType::i32);
          if (variant < 2) {
            c.ref.inputs = {{"logits", randn({s.T, s.V}, seed++, 3.0)}, {"targets", y}};
            c.ref.grad_of = {"logits"};
          } else {
            c.ref.inputs = {{"hidden", randn({s.T, s.D}, seed++)},
                            {"weight", randn({s.V, s.D}, seed++, 0.5)},
                            {"targets", y}};
            c.ref.grad_of = {"hidden", "weight"};
          }
          c.fn = [variant, z, red](auto& in) {
            Tensor out;
            switch (variant) {
              case 0: out = cross_entropy(in[0], in[1], -100, z, red); break;
              case 1: out = composed::cross_entropy(in[0], in[1], -100, z, red); break;
              case 2: out = linear_cross_entropy(in[0], in[1], in[2], -100, z, red); break;
              default: out = composed::linear_cross_entropy(in[0], in[1], in[2], -100, z, red);
            }
            return std::vector<Tensor>{out};
          };
          c.tol = {1e-5, 1e-5};
          c.grad_tol = {1e-5, 1e-5};
          cs.push_back(c);
        }
      }
    }
    for (double temp : {1.0, 0.7}) {
      for (bool fused : {true, false}) {
        OpCheck c;
        c.ref.op = "logprobs";
        c.ref.label = fmt::format("logprobs T{} V{} temp {} fused={}", s.T, s.V, temp, fused);
        c.ref.attrs = {{"temperature", temp}};
        c.ref.inputs = {{"hidden", randn({s.T, s.D}, seed++)},
                        {"weight", randn({s.V, s.D}, seed++, 0.5)},
                        {"targets", randint({s.T}, s.V, seed++)}};
        c.ref.grad_of = {"hidden", "weight"};
        c.fn = [temp, fused](auto& in) {
          return std::vector<Tensor>{fused ? logprobs(in[0], in[1], in[2], temp)
                                           : composed::logprobs(in[0], in[1], in[2], temp)};
        };
        c.tol = {1e-5, 1e-5};
        c.grad_tol = {1e-5, 1e-5};
        cs.push_back(c);
      }
    }
  }
  check_ops(cs);
}

TEST(Loss, LogprobsFusedEqualsComposedBitwiseAndRowsAreBatchInvariant) {
  // V spans two vocabulary chunks; temperature scaling on both sides.
  const int64_t T = 9, D = 32, V = 5000;
  Tensor h = randn({T, D}, 1), w = randn({V, D}, 2, 0.2);
  Tensor y = randint({T}, V, 3);
  auto a = logprobs(h, w, y, 0.8).to_vector<float>();
  auto b = composed::logprobs(h, w, y, 0.8).to_vector<float>();
  EXPECT_EQ(std::memcmp(a.data(), b.data(), T * 4), 0);
  // Row 4 alone gives the same bits as inside the batch.
  auto r = logprobs(h.narrow(0, 4, 1), w, y.narrow(0, 4, 1), 0.8).to_vector<float>();
  EXPECT_EQ(std::memcmp(&r[0], &a[4], 4), 0);
}

TEST(Loss, LogprobsPanelsEqualsLogprobs) {
  // The LM head repacked into GEMM panels (V = 5001: two vocabulary chunks and a
  // zero-padded last panel) gives logprobs' bits for decode and prefill row counts.
  autograd::NoGradGuard ng;
  const int64_t D = 40, V = 5001;
  Tensor w = randn({V, D}, 2, 0.2), panels = repack_linear_weight(w);
  for (int64_t T : {1, 7, 40}) {
    Tensor h = randn({T, D}, 10 + T), y = randint({T}, V, 20 + T);
    for (double temp : {1.0, 0.7}) {
      auto want = logprobs(h, w, y, temp).to_vector<float>();
      auto got = logprobs_panels(h, panels, V, y, temp).to_vector<float>();
      EXPECT_EQ(std::memcmp(want.data(), got.data(), T * 4), 0) << "T=" << T << " temp=" << temp;
    }
  }
  Tensor h = randn({2, D}, 1), y = randint({2}, V, 2);
  EXPECT_THROW(logprobs_panels(h, w, V, y), Error);                          // not repacked
  EXPECT_THROW(logprobs_panels(h, panels, V + 64, y), Error);                // panel count
  EXPECT_THROW(logprobs_panels(randn({2, D + 1}, 1), panels, V, y), Error);  // D differs
  EXPECT_THROW(logprobs_panels(h, panels, V, Tensor::from_vector<int64_t>({0, V}, {2})), Error);
  EXPECT_THROW(logprobs_panels(h, panels, V, y, 0.0), Error);
  autograd::EnableGradGuard eg;
  Tensor hg = randn({2, D}, 1).requires_grad_();
  try {
    logprobs_panels(hg, panels, V, y);
    ADD_FAILURE() << "no error for a hidden that needs grad";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("logprobs_panels: no backward"), std::string::npos)
        << e.what();
  }
}

// expected_grad: the gradients computed with the forward are the recomputing backward's,
// bit for bit, and are used only when the upstream gradient is that value; any other
// upstream value still gets the right gradients (recomputed, and counted).
TEST(Loss, ExpectedGradGivesTheSameGradientsAndFallsBack) {
  const int64_t T = 29, D = 12, V = 4099;
  const Tensor h0 = randn({T, D}, 61), w0 = scale(randn({V, D}, 62), 0.3);
  const Tensor y = targets_with_ignored(T, V, 63, DType::i64);
  // Gradients of scale(loss, s) for hint `hint`; recomputes counted across the backward.
  auto grads = [&](Reduction red, double hint, double s, int64_t* recomputes) {
    Tensor h = h0.clone().requires_grad_(), w = w0.clone().requires_grad_();
    Tensor l = linear_cross_entropy(h, w, y, -100, 1e-3, red, hint);
    const int64_t before = linear_cross_entropy_recomputes();
    (red == Reduction::none ? sum(scale(l, s)) : scale(l, s)).backward();
    *recomputes = linear_cross_entropy_recomputes() - before;
    return std::pair{h.grad(), w.grad()};
  };
  auto same = [](const Tensor& a, const Tensor& b) {
    return a.numel() == b.numel() &&
           std::memcmp(a.data<float>(), b.data<float>(), a.numel() * 4) == 0;
  };
  for (Reduction red : {Reduction::sum, Reduction::none, Reduction::mean}) {
    for (double s : {1.0 / 23.0, 0.5}) {
      int64_t n_ref = 0, n_hint = 0, n_other = 0;
      const auto ref = grads(red, 0.0, s, &n_ref);
      const auto hinted = grads(red, s, s, &n_hint);
      const auto other = grads(red, s * 3, s, &n_other);  // the upstream is not the hint
      EXPECT_EQ(n_ref, 1);
      EXPECT_EQ(n_hint, red == Reduction::mean ? 1 : 0) << red_name(red);  // mean: no eager pass
      EXPECT_EQ(n_other, 1) << red_name(red);
      for (const auto* g : {&hinted, &other}) {
        EXPECT_TRUE(same(g->first, ref.first)) << red_name(red) << " s = " << s << ": dhidden";
        EXPECT_TRUE(same(g->second, ref.second)) << red_name(red) << " s = " << s << ": dweight";
      }
    }
  }
  // Reduction::none, upstream = the hint on every row but the last: recomputed, right.
  {
    std::vector<float> wv(T, 0.5f);
    wv.back() = 0.25f;
    const Tensor rw = Tensor::from_vector(wv, {T});
    Tensor grads[2][2];
    int64_t recomputes = 0;
    for (int i = 0; i < 2; ++i) {
      Tensor h = h0.clone().requires_grad_(), w = w0.clone().requires_grad_();
      const int64_t before = linear_cross_entropy_recomputes();
      sum(mul(linear_cross_entropy(h, w, y, -100, 1e-3, Reduction::none, i ? 0.5 : 0.0), rw))
          .backward();
      recomputes += linear_cross_entropy_recomputes() - before;
      grads[i][0] = h.grad();
      grads[i][1] = w.grad();
    }
    EXPECT_EQ(recomputes, 2);
    EXPECT_TRUE(same(grads[1][0], grads[0][0]) && same(grads[1][1], grads[0][1]));
  }
  // Only hidden needing grad, and a bf16 weight; the forward value does not depend on
  // the hint; no eager pass without grad mode.
  for (const Tensor& w : {w0, w0.to(DType::bf16)}) {
    Tensor h = h0.clone().requires_grad_(), h_ref = h0.clone().requires_grad_();
    Tensor l = linear_cross_entropy(h, w, y, -100, 0.0, Reduction::sum, 0.25);
    Tensor l_ref = linear_cross_entropy(h_ref, w, y, -100, 0.0, Reduction::sum);
    EXPECT_EQ(l.item<float>(), l_ref.item<float>());
    const int64_t before = linear_cross_entropy_recomputes();
    scale(l, 0.25).backward();
    EXPECT_EQ(linear_cross_entropy_recomputes(), before);
    scale(l_ref, 0.25).backward();
    EXPECT_TRUE(same(h.grad(), h_ref.grad()));
    autograd::NoGradGuard ng;
    EXPECT_EQ(linear_cross_entropy(h, w, y, -100, 0.0, Reduction::sum, 0.25).item<float>(),
              l_ref.item<float>());
  }
  EXPECT_THROW(linear_cross_entropy(h0, w0, y, -100, 0.0, Reduction::sum, -1.0), Error);
  EXPECT_THROW(linear_cross_entropy(h0, w0, y, -100, 0.0, Reduction::sum, 1e-50),
               Error);  // float 0
}

TEST(Loss, AllIgnoredMeanIsNaNAndSumIsZero) {
  Tensor logits = randn({3, 5}, 4).requires_grad_();
  Tensor y = Tensor::from_vector<int64_t>({-100, -100, -100}, {3});
  EXPECT_TRUE(std::isnan(cross_entropy(logits, y).item<float>()));
  Tensor s = cross_entropy(logits, y, -100, 0.0, Reduction::sum);
  EXPECT_EQ(s.item<float>(), 0.0f);
  s.backward();
  for (float g : logits.grad().to_vector<float>()) EXPECT_EQ(g, 0.0f);
}

TEST(Loss, Errors) {
  Tensor logits = Tensor::zeros({2, 4});
  try {
    cross_entropy(logits, Tensor::from_vector<int64_t>({1, 4}, {2}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cross_entropy: targets[1] = 4 is out of range for V = 4"),
              std::string::npos)
        << e.what();
  }
  try {
    linear_cross_entropy(Tensor::zeros({2, 3}), Tensor::zeros({5, 4}), Tensor::zeros({2}, DType::i64));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("linear_cross_entropy: hidden is [2, 3] but weight is [5, 4]"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(cross_entropy(logits, Tensor::zeros({3}, DType::i64)), Error);
  EXPECT_THROW(cross_entropy(logits, Tensor::zeros({2})), Error);  // f32 targets
  EXPECT_THROW(logprobs(Tensor::zeros({2, 3}), Tensor::zeros({5, 3}), Tensor::zeros({2}, DType::i64), 0.0),
               Error);
  EXPECT_THROW(logprobs(Tensor::zeros({1, 3}), Tensor::zeros({5, 3}), Tensor::full({1}, -100, DType::i64)),
               Error);
}

}  // namespace
}  // namespace titan
