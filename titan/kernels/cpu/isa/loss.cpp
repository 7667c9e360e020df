// Per-tile pieces of the fused cross-entropy (per ISA): the vocabulary stats of a tile
// of logits rows and the gradient of the loss w.r.t. a tile of logits. The GEMMs and
// the tiling live in titan/kernels/cpu/loss.cpp. See titan/kernels/cpu/loss.h.
#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/isa/reduce.h"
#include "titan/kernels/cpu/isa/vocab_lse.h"

namespace titan::kernels::cpu::TITAN_ISA_NS {
using namespace simd;

// For rows r < rows of a logits tile (rows, n) (row stride ldl) holding vocabulary
// columns [c0, c0 + n): st[r] = chunk stats (first chunk) or merged into st[r]; zt[r] =
// scaled logit of targets[r] when it falls in this chunk. st, zt, targets: (rows).
void ce_tile_stats(VocabStats* st, float* zt, const float* logits, int64_t ldl, int64_t rows,
                   int64_t c0, int64_t n, const int64_t* targets, float inv_temperature,
                   bool first_chunk) {
  parallel_for_grain(rows, row_grain(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = logits + r * ldl;
      const VocabStats s = TITAN_ISA_NS::vocab_chunk_stats(x, n, inv_temperature);
      st[r] = first_chunk ? s : TITAN_ISA_NS::merge_chunk_stats(st[r], s);
      const int64_t y = targets[r];
      if (y >= c0 && y < c0 + n) zt[r] = x[y - c0] * inv_temperature;
    }
  });
}

// g (rows, n) (row stride ldg; may alias logits with ldg == ldl) = d loss / d logits for
// the columns [c0, c0 + n) of the tile: dloss·τ⁻¹·(p·(1 + 2·zc·lse) − [j == y]) with
// p = vexp(z − lse); zero rows where targets[r] == ignore_index.
void ce_tile_grad(float* g, int64_t ldg, const float* logits, int64_t ldl, int64_t rows,
                  int64_t c0, int64_t n, const int64_t* targets, const float* lse,
                  const float* dloss, int64_t ignore_index, float z_loss_coef,
                  float inv_temperature) {
  parallel_for_grain(rows, row_grain(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = logits + r * ldl;
      float* gr = g + r * ldg;
      const int64_t y = targets[r];
      if (y == ignore_index) {
        for_vectors(n, [&](int64_t i, int c) { store_c(gr + i, zero(), c); });
        continue;
      }
      const float a = dloss[r] * inv_temperature;
      const float b = z_loss_coef != 0.0f ? a * (1.0f + 2.0f * z_loss_coef * lse[r]) : a;
      const vf it = set1(inv_temperature), lv = set1(lse[r]), bv = set1(b);
      for_vectors(n, [&](int64_t i, int c) {
        const vf p = vexp(sub(mul(load_c(x + i, c, 0.0f), it), lv));
        store_c(gr + i, mul(bv, p), c);
      });
      if (y >= c0 && y < c0 + n) gr[y - c0] -= a;
    }
  });
}

}  // namespace titan::kernels::cpu::TITAN_ISA_NS
