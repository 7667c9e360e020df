// Rotary position embedding (RoPE; Su et al. 2021) as a differentiable op over the
// kernels of titan/kernels/cpu/rope.h. The cos/sin cache is fp32 (angles computed in
// double, rounded once) and gathered by a positions tensor, so a packed training
// batch and a decode step read the same table entries (notes/batch-invariance.md).
// Rotate-half (Llama/HF/NeoX) and interleaved (GPT-J/Meta) pairings; partial rotary
// (only the first R dims of each head rotate). Gradient w.r.t. x: the inverse rotation.
// The composed twin (titan::composed::apply_rotary) gives the same bits.
//
// Errors (titan::Error naming op and argument): x not f32 (T, H, Dh); positions not a
// (T) i32/i64 tensor or a position outside [0, P); R > Dh.
#pragma once
#include <utility>

#include "titan/core/tensor.h"
#include "titan/kernels/cpu/rope.h"

namespace titan {

using RopeStyle = kernels::cpu::RopeStyle;
using RopeScaling = kernels::cpu::RopeScaling;

struct RopeCache {
  Tensor cos, sin;         // (P, R/2) f32
  int64_t rotary_dim = 0;  // R (even)
  int64_t max_positions() const { return cos.defined() ? cos.size(0) : 0; }
};

// cos/sin(p · inv_freq[i]), inv_freq[i] = theta^(−2i/R) after `scaling`, for p < P.
RopeCache rope_cache(int64_t max_positions, int64_t rotary_dim, double theta,
                     const RopeScaling& scaling = {});

// x (T, H, Dh) rotated by positions (T): token t uses row positions[t] of the cache.
Tensor apply_rotary(const Tensor& x, const Tensor& positions, const RopeCache& cache,
                    RopeStyle style = RopeStyle::rotate_half);
// q (T, H, Dh) and k (T, Hkv, Dh) in one pass; returns {q_rotated, k_rotated}.
std::pair<Tensor, Tensor> apply_rotary(const Tensor& q, const Tensor& k, const Tensor& positions,
                                       const RopeCache& cache,
                                       RopeStyle style = RopeStyle::rotate_half);

namespace composed {
// The same rotation from index_select / narrow / mul / sub / add / cat (products rounded,
// then added: the kernel's arithmetic).
Tensor apply_rotary(const Tensor& x, const Tensor& positions, const RopeCache& cache,
                    RopeStyle style = RopeStyle::rotate_half);
}  // namespace composed

}  // namespace titan
