// Scalar references of the bf16 LM head (titan/ops/lm_head_bf16.h) for tests: its logits
// (the chain of titan/kernels/cpu/bf16.h) and the fused loss's backward rule (the fp32 logit
// gradient rounded to bf16, the two products on that chain, each result rounded to bf16), written
// as plain loops over tests/kernels/bf16_chain_ref.h's software FMAs.
#pragma once
#include <cstdint>
#include <vector>

#include "tests/kernels/bf16_chain_ref.h"
#include "titan/core/dtype.h"

namespace titan::test::lm_head_bf16 {

inline uint16_t b16(float x) { return f32_to_bf16(x); }
inline float bf(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// x (n) -> bf16 bits (RNE).
inline std::vector<uint16_t> to_b16(const std::vector<float>& x) {
  std::vector<uint16_t> o(x.size());
  for (size_t i = 0; i < x.size(); ++i) o[i] = b16(x[i]);
  return o;
}

// c = sum over k < K of a(k) * b(k) on the chain: pairs, odd element first, +0 past K.
template <typename A, typename B>
float chain(int64_t K, A a, B b) {
  float c = 0.0f;
  for (int64_t p = 0; 2 * p < K; ++p) {
    const bool odd = 2 * p + 1 < K;
    c = bf16_chain::step(odd ? a(2 * p + 1) : uint16_t{0}, odd ? b(2 * p + 1) : uint16_t{0}, c);
    c = bf16_chain::step(a(2 * p), b(2 * p), c);
  }
  return c;
}

// logits (T, V) of hidden (T, D) and weight (V, D), both f32 (rounded to bf16 here).
inline std::vector<float> logits(const std::vector<float>& h, const std::vector<float>& w, int64_t T, int64_t D,
                                 int64_t V) {
  const auto hb = to_b16(h), wb = to_b16(w);
  std::vector<float> z(static_cast<size_t>(T * V));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t v = 0; v < V; ++v)
      z[t * V + v] = chain(D, [&](int64_t k) { return hb[t * D + k]; }, [&](int64_t k) { return wb[v * D + k]; });
  return z;
}

// The backward rule for the fp32 logit gradient g (T, V): gb = bf16(g),
// dh (T, D) = bf(gb · wb) (K = V), dw (V, D) = bf(gbᵀ · hb) (K = T).
inline void backward(const std::vector<float>& g, const std::vector<float>& h, const std::vector<float>& w,
                     int64_t T, int64_t D, int64_t V, std::vector<float>& dh, std::vector<float>& dw) {
  const auto gb = to_b16(g), hb = to_b16(h), wb = to_b16(w);
  dh.assign(static_cast<size_t>(T * D), 0.0f);
  dw.assign(static_cast<size_t>(V * D), 0.0f);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < D; ++k)
      dh[t * D + k] =
          bf(chain(V, [&](int64_t v) { return gb[t * V + v]; }, [&](int64_t v) { return wb[v * D + k]; }));
  for (int64_t v = 0; v < V; ++v)
    for (int64_t k = 0; k < D; ++k)
      dw[v * D + k] =
          bf(chain(T, [&](int64_t t) { return gb[t * V + v]; }, [&](int64_t t) { return hb[t * D + k]; }));
}

}  // namespace titan::test::lm_head_bf16
