// The bf16 LM head (titan/ops/lm_head_bf16.h) against references computed here:
//  - logits: a scalar loop of the chain stated in titan/kernels/cpu/bf16.h (pairs, odd
//    element first, software fp32 FMAs with DAZ inputs and FTZ results), bitwise, from
//    the fp32 weight and from its panels;
//  - logprobs: logprobs_from_logits of those logits, bitwise; each row alone equals the
//    row in a batch (batch invariance);
//  - gradients: float64 sums over the bf16 values of hidden and weight (the function the
//    forward computes), within fp32 accumulation error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "tests/kernels/bf16_chain_ref.h"
#include "tests/util/torch_ref.h"
#include "titan/autograd/node.h"
#include "titan/core/dtype.h"
#include "titan/core/error.h"
#include "titan/kernels/cpu/softmax.h"
#include "titan/ops/bf16_compute.h"
#include "titan/ops/lm_head_bf16.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/reduce.h"

namespace titan {
namespace {

using test::bf16_chain::daz;
using test::bf16_chain::fma_ftz;
float bf(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// The chain of bf16.h for logits[t][v] of hidden (T, D) and weight (V, D).
std::vector<float> chain_logits(const std::vector<float>& h, const std::vector<float>& w, int64_t T, int64_t D,
                                int64_t V) {
  std::vector<float> z(static_cast<size_t>(T * V));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t v = 0; v < V; ++v) {
      float c = 0.0f;
      for (int64_t p = 0; 2 * p < D; ++p) {
        const float a1 = 2 * p + 1 < D ? bf(h[t * D + 2 * p + 1]) : 0.0f;
        const float b1 = 2 * p + 1 < D ? bf(w[v * D + 2 * p + 1]) : 0.0f;
        c = fma_ftz(daz(a1), daz(b1), daz(c));
        c = fma_ftz(daz(bf(h[t * D + 2 * p])), daz(bf(w[v * D + 2 * p])), daz(c));
      }
      z[t * V + v] = c;
    }
  return z;
}

bool same_bits(const Tensor& a, const std::vector<float>& b) {
  return a.numel() == static_cast<int64_t>(b.size()) && std::memcmp(a.data_ptr(), b.data(), b.size() * 4) == 0;
}

struct Case {
  int64_t T, D, V;
};

TEST(LmHeadBf16, LogitsAreTheChainBitwise) {
  // D odd (the last pair is padded with zeros), V not a multiple of the panel width.
  for (Case c : {Case{1, 8, 5}, Case{5, 37, 100}, Case{9, 64, 333}}) {
    const Tensor h = test::randn({c.T, c.D}, 11 + c.D), w = test::randn({c.V, c.D}, 12 + c.V);
    const std::vector<float> ref = chain_logits(h.to_vector<float>(), w.to_vector<float>(), c.T, c.D, c.V);
    autograd::NoGradGuard ng;
    EXPECT_TRUE(same_bits(logits_bf16(h, w), ref)) << c.T << "x" << c.D << "x" << c.V;
    const Tensor panels = repack_linear_weight_bf16(w);
    EXPECT_TRUE(same_bits(logits_panels_bf16(h, panels, c.V), ref)) << c.T << "x" << c.D << "x" << c.V;
    // Not rounded to bf16: some logit has bits below bf16's 8.
    bool wide = false;
    for (float z : ref) wide |= (f32_bits(z) & 0xffffu) != 0;
    EXPECT_TRUE(wide);
  }
}

TEST(LmHeadBf16, LogprobsAreTheLogprobFunctionOfThoseLogitsAndBatchInvariant) {
  const Case c{7, 37, 333};
  const Tensor h = test::randn({c.T, c.D}, 21), w = test::randn({c.V, c.D}, 22);
  const Tensor y = test::randint({c.T}, c.V, 23);
  const std::vector<float> z = chain_logits(h.to_vector<float>(), w.to_vector<float>(), c.T, c.D, c.V);
  for (double temp : {1.0, 0.7}) {
    std::vector<float> ref(static_cast<size_t>(c.T));
    kernels::cpu::logprobs_from_logits(ref.data(), nullptr, z.data(), y.data<int64_t>(), c.T, c.V,
                                       static_cast<float>(1.0 / temp));
    autograd::NoGradGuard ng;
    EXPECT_TRUE(same_bits(logprobs_bf16(h, w, y, temp), ref)) << temp;
    const Tensor panels = repack_linear_weight_bf16(w);
    EXPECT_TRUE(same_bits(logprobs_panels_bf16(h, panels, c.V, y, temp), ref)) << temp;
    for (int64_t t = 0; t < c.T; ++t) {
      const Tensor one = logprobs_panels_bf16(h.narrow(0, t, 1).contiguous(), panels, c.V, y.narrow(0, t, 1).contiguous(), temp);
      EXPECT_EQ(f32_bits(one.item<float>()), f32_bits(ref[t])) << "row " << t;
    }
  }
}

TEST(LmHeadBf16, GradientsMatchFloat64OnTheBf16Values) {
  const Case c{6, 24, 50};
  const double temp = 0.8;
  Tensor h = test::randn({c.T, c.D}, 31), w = test::randn({c.V, c.D}, 32);
  const Tensor y = test::randint({c.T}, c.V, 33), up = test::randn({c.T}, 34);
  h.requires_grad_();
  w.requires_grad_();
  sum(mul(logprobs_bf16(h, w, y, temp), up)).backward();
  // float64: z = hb · wbᵀ, g = up · (onehot − softmax(z / τ)) / τ, dh = g · wb, dw = gᵀ · hb.
  const auto hv = h.detach().to_vector<float>(), wv = w.detach().to_vector<float>();
  const auto yv = y.to_vector<int64_t>();
  const auto uv = up.to_vector<float>();
  std::vector<double> dh(static_cast<size_t>(c.T * c.D), 0.0), dw(static_cast<size_t>(c.V * c.D), 0.0);
  for (int64_t t = 0; t < c.T; ++t) {
    std::vector<double> z(static_cast<size_t>(c.V));
    double mx = -1e300, s = 0;
    for (int64_t v = 0; v < c.V; ++v) {
      double a = 0;
      for (int64_t k = 0; k < c.D; ++k) a += double(bf(hv[t * c.D + k])) * double(bf(wv[v * c.D + k]));
      z[v] = a / temp;
      mx = std::max(mx, z[v]);
    }
    for (double& e : z) s += std::exp(e - mx);
    for (int64_t v = 0; v < c.V; ++v) {
      const double g = uv[t] * ((v == yv[t] ? 1.0 : 0.0) - std::exp(z[v] - mx) / s) / temp;
      for (int64_t k = 0; k < c.D; ++k) {
        dh[t * c.D + k] += g * double(bf(wv[v * c.D + k]));
        dw[v * c.D + k] += g * double(bf(hv[t * c.D + k]));
      }
    }
  }
  auto check = [](const Tensor& got, const std::vector<double>& ref, const char* name) {
    const auto g = got.to_vector<float>();
    double err = 0, scale = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      err = std::max(err, std::fabs(double(g[i]) - ref[i]));
      scale = std::max(scale, std::fabs(ref[i]));
    }
    EXPECT_GT(scale, 0.0) << name;
    EXPECT_LE(err, 1e-5 * scale) << name << ": max |err| " << err << " of max |ref| " << scale;
  };
  check(h.grad(), dh, "dhidden");
  check(w.grad(), dw, "dweight");
}

TEST(LmHeadBf16, BadInputsAreRefused) {
  const Tensor h = test::randn({2, 8}, 1), w = test::randn({5, 8}, 2), y = test::randint({2}, 5, 3);
  autograd::NoGradGuard ng;
  EXPECT_THROW(logits_bf16(h, test::randn({5, 7}, 4)), Error);
  EXPECT_THROW(logprobs_bf16(h, w, Tensor::from_vector(std::vector<int64_t>{0, 5}, {2}), 1.0), Error);
  EXPECT_THROW(logprobs_bf16(h, w, y, 0.0), Error);
  EXPECT_THROW(logits_panels_bf16(h, repack_linear_weight_bf16(w), 40), Error);  // panels of 5 rows
  EXPECT_THROW(logits_panels_bf16(h, test::randn({1, 8, 32}, 5), 5), Error);     // f32, not bf16 panels
}

}  // namespace
}  // namespace titan
