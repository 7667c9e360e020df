// The one row-reduction scheme of titan's row kernels (notes/batch-invariance.md,
// "Row kernels"): a row of n floats is read as vectors of W lanes; vector j feeds
// lane accumulator j % 4; the last partial vector is a masked load whose other lanes
// hold the neutral element; the four accumulators are combined by one fixed tree
// (a0 ∘ a1) ∘ (a2 ∘ a3) and then by the fixed horizontal tree of simd.h. The
// arithmetic therefore depends on the row's own length and values only.
// Included only from titan/kernels/cpu/isa/*.cpp.
#pragma once
// GCC 12 reports -W(maybe-)uninitialized inside its own AVX-512 intrinsic headers
// (_mm512_undefined_* operands); silence it for the TUs that use this header. It must
// precede the first include of <immintrin.h>.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <algorithm>
#include <cstdint>

#include "titan/kernels/cpu/isa/simd.h"

namespace titan::kernels::cpu::TITAN_ISA_NS {
namespace simd {

// Loads c lanes at p (c == W: a full vector); the other lanes hold `fill`.
TITAN_SIMD_INLINE vf load_c(const float* p, int c, float fill) {
  return c == W ? load(p) : load_n_fill(p, c, fill);
}
// Stores the first c lanes of v at p.
TITAN_SIMD_INLINE void store_c(float* p, vf v, int c) {
  if (c == W) store(p, v); else store_n(p, v, c);
}
// exp of one float through THE shared vexp (for scalar epilogues and merges).
inline float sexp(float x) { return first(vexp(set1(x))); }

// |x| as max(x, -x) (NaN stays NaN).
TITAN_SIMD_INLINE vf vabs(vf x) { return max(x, sub(zero(), x)); }

// Reduces [0, n) with step(acc, i, c) -> acc, called for the vector of c lanes
// starting at column i (c < W only for the last, masked vector; step fills the
// other lanes with the neutral element). Vector j feeds accumulator j % 4, all
// four start at `init`, and comb merges them as comb(comb(a0, a1), comb(a2, a3)).
template <class Step, class Comb>
TITAN_SIMD_INLINE vf reduce4(int64_t n, vf init, Step step, Comb comb) {
  vf a0 = init, a1 = init, a2 = init, a3 = init;
  int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    a0 = step(a0, i, W);
    a1 = step(a1, i + W, W);
    a2 = step(a2, i + 2 * W, W);
    a3 = step(a3, i + 3 * W, W);
  }
  auto cnt = [&](int64_t at) { return static_cast<int>(std::min<int64_t>(W, n - at)); };
  if (i < n) { a0 = step(a0, i, cnt(i)); i += W; }
  if (i < n) { a1 = step(a1, i, cnt(i)); i += W; }
  if (i < n) { a2 = step(a2, i, cnt(i)); i += W; }
  if (i < n) { a3 = step(a3, i, cnt(i)); }
  return comb(comb(a0, a1), comb(a2, a3));
}

// Lane-wise sum / max combiners for reduce4.
TITAN_SIMD_INLINE vf comb_add(vf a, vf b) { return add(a, b); }
TITAN_SIMD_INLINE vf comb_max(vf a, vf b) { return max(a, b); }

// Calls f(i, c) for the vectors of [0, n) in order; c < W only for the last one.
template <class F>
inline void for_vectors(int64_t n, F f) {
  int64_t i = 0;
  for (; i + W <= n; i += W) f(i, W);
  if (i < n) f(i, static_cast<int>(n - i));
}

}  // namespace simd

// Rows per parallel task so a task holds at least ~32K elements (threads split rows;
// the split never changes a row's arithmetic).
inline int64_t row_grain(int64_t row_len) {
  return row_len >= 32768 ? 1 : 32768 / (row_len < 1 ? 1 : row_len);
}

}  // namespace titan::kernels::cpu::TITAN_ISA_NS
