// Fused chunked cross-entropy: tiling over rows and vocabulary chunks, the GEMMs
// (gemm.h), validation and run-time ISA dispatch of the per-tile pieces (isa/loss.cpp).
#include "titan/kernels/cpu/loss.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "titan/core/error.h"
#include "titan/core/host_alloc.h"
#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/kernels/cpu/gemm.h"
#include "titan/kernels/cpu/softmax.h"

TITAN_DECLARE_ISA(void, ce_tile_stats,
                  (titan::kernels::cpu::VocabStats * st, float* zt, const float* logits,
                   int64_t ldl, int64_t rows, int64_t c0, int64_t n, const int64_t* targets,
                   float inv_temperature, bool first_chunk))
TITAN_DECLARE_ISA(void, ce_tile_grad,
                  (float* g, int64_t ldg, const float* logits, int64_t ldl, int64_t rows,
                   int64_t c0, int64_t n, const int64_t* targets, const float* lse,
                   const float* dloss, int64_t ignore_index, float z_loss_coef,
                   float inv_temperature))

namespace titan::kernels::cpu {

namespace {

constexpr int64_t kNoIgnore = INT64_MIN;

struct Checks {
  const char* fn;
  void sizes(int64_t T, int64_t D, int64_t V) const {
    TITAN_CHECK(T >= 0, "{}: T must be >= 0, got {}", fn, T);
    TITAN_CHECK(D >= 1, "{}: D must be >= 1, got {}", fn, D);
    TITAN_CHECK(V >= 1, "{}: V must be >= 1, got {}", fn, V);
  }
  void ptr(const char* name, const void* p, int64_t T) const {
    TITAN_CHECK(p != nullptr || T == 0, "{}: {} must not be null", fn, name);
  }
  void scalars(float z_loss_coef, float inv_temperature) const {
    TITAN_CHECK(std::isfinite(z_loss_coef) && z_loss_coef >= 0.0f,
                "{}: z_loss_coef must be finite and >= 0, got {}", fn, z_loss_coef);
    TITAN_CHECK(std::isfinite(inv_temperature) && inv_temperature > 0.0f,
                "{}: inv_temperature must be finite and > 0, got {}", fn, inv_temperature);
  }
  void targets(const int64_t* y, int64_t T, int64_t V, int64_t ignore_index) const {
    for (int64_t t = 0; t < T; ++t)
      TITAN_CHECK(y[t] == ignore_index || (y[t] >= 0 && y[t] < V),
                  "{}: targets[{}] = {} is outside [0, V = {}) and is not ignore_index ({})", fn, t,
                  y[t], V, ignore_index);
  }
  // What every kernel over hidden · weightᵀ checks (after its own output pointers).
  void fused(int64_t T, int64_t D, int64_t V, const float* hidden, const float* weight,
             const int64_t* y, int64_t ignore_index, float z_loss_coef,
             float inv_temperature) const {
    ptr("hidden", hidden, T);
    ptr("weight", weight, T);
    ptr("targets", y, T);
    scalars(z_loss_coef, inv_temperature);
    targets(y, T, V, ignore_index);
  }
};

void zero_rows(float* w, int64_t V, int64_t D) {
  parallel_for_grain(V, 64, [&](int64_t v0, int64_t v1) {
    std::memset(w + v0 * D, 0, sizeof(float) * (v1 - v0) * D);
  });
}

template <typename I>
std::vector<int64_t> widen(const char* fn, const I* p, int64_t T) {
  TITAN_CHECK(p != nullptr || T <= 0, "{}: targets must not be null", fn);
  return std::vector<int64_t>(p, p + (T > 0 ? T : 0));
}

// Scratch for one logits tile: rows x chunk columns (a small vocabulary needs only V).
HostArray<float> tile_buffer(int64_t T, int64_t V) {
  return HostArray<float>(static_cast<size_t>(std::min(T, kCeRowTile) * std::min(V, kVocabChunk)));
}

// Logits of `rows` rows h for the vocabulary chunk [c0, c0 + n) into out (row stride
// ldo), merged into their rows' stats st and target logits zt (chunks in ascending order).
void chunk_stats(VocabStats* st, float* zt, float* out, int64_t ldo, const float* h,
                 const float* weight, bool panels, const int64_t* targets, int64_t rows, int64_t D,
                 int64_t c0, int64_t n, float inv_temperature) {
  if (panels)
    gemm_f32_panels(rows, n, D, h, D, weight + c0 * D, out, ldo, /*accumulate=*/false);
  else
    gemm_f32(rows, n, D, h, D, weight + c0 * D, D, /*b_trans=*/true, out, ldo,
             /*accumulate=*/false);
  TITAN_DISPATCH(ce_tile_stats, st, zt, out, ldo, rows, c0, n, targets, inv_temperature, c0 == 0);
}

// g (rows, n; row stride ldg) holds the logits of rows h for the vocabulary chunk
// [c0, c0 + n): turns them into the loss gradient in place, then
// dhidden (rows, D) (+)= g · W_c (= over the first chunk) and dW_c (n, D) += gᵀ · h.
// wc_panels: W_c repacked by gemm_pack_panels_nn (the same bits), or null.
void chunk_grad(float* g, int64_t ldg, float* dhidden, float* dweight, const float* h,
                const float* weight, const float* wc_panels, const int64_t* targets,
                const float* lse, const float* dloss, int64_t rows, int64_t D, int64_t c0,
                int64_t n, int64_t ignore_index, float z_loss_coef, float inv_temperature) {
  const float* wc = weight + c0 * D;
  TITAN_DISPATCH(ce_tile_grad, g, ldg, g, ldg, rows, c0, n, targets, lse, dloss, ignore_index,
                 z_loss_coef, inv_temperature);
  if (dhidden && wc_panels)
    gemm_f32_panels(rows, D, n, g, ldg, wc_panels, dhidden, D, /*accumulate=*/c0 > 0);
  else if (dhidden)
    gemm_f32(rows, D, n, g, ldg, wc, D, /*b_trans=*/false, dhidden, D, /*accumulate=*/c0 > 0);
  if (dweight) gemm_f32_tn(n, D, rows, g, ldg, h, D, dweight + c0 * D, D, /*accumulate=*/true);
}

// Per-row vocabulary stats st (T) and scaled target logits zt (T) of hidden · weightᵀ,
// computed kVocabChunk columns × kCeRowTile rows at a time, chunks in ascending order.
// weight is (V, D), or its panel layout (gemm_pack_panels) when panels: the same bits.
void chunked_stats(VocabStats* st, float* zt, const float* hidden, const float* weight, bool panels,
                   const int64_t* targets, int64_t T, int64_t D, int64_t V, float inv_temperature) {
  if (T == 0) return;
  auto buf = tile_buffer(T, V);
  std::fill(zt, zt + T, 0.0f);
  for (int64_t c0 = 0; c0 < V; c0 += kVocabChunk) {
    const int64_t n = std::min(kVocabChunk, V - c0);
    for (int64_t r0 = 0; r0 < T; r0 += kCeRowTile)
      chunk_stats(st + r0, zt + r0, buf.get(), n, hidden + r0 * D, weight, panels, targets + r0,
                  std::min(kCeRowTile, T - r0), D, c0, n, inv_temperature);
  }
}

// loss = −logprob (+ z-loss), 0 for ignored rows; lse optional.
void finish_loss(float* loss, float* lse, const VocabStats* st, const float* zt,
                 const int64_t* targets, int64_t T, int64_t ignore_index, float z_loss_coef) {
  for (int64_t t = 0; t < T; ++t) {
    const float l = vocab_lse(st[t]);
    if (lse) lse[t] = l;
    if (targets[t] == ignore_index) {
      loss[t] = 0.0f;
      continue;
    }
    float v = -vocab_logprob(st[t], zt[t]);
    if (z_loss_coef != 0.0f) v = v + z_loss_coef * (l * l);
    loss[t] = v;
  }
}

}  // namespace

void cross_entropy_fwd(float* loss_per_row, float* lse, const float* hidden, const float* weight,
                       const int64_t* targets, int64_t T, int64_t D, int64_t V,
                       int64_t ignore_index, float z_loss_coef, float inv_temperature) {
  const Checks ck{"cross_entropy_fwd"};
  ck.sizes(T, D, V);
  ck.ptr("loss_per_row", loss_per_row, T);
  ck.fused(T, D, V, hidden, weight, targets, ignore_index, z_loss_coef, inv_temperature);
  std::vector<VocabStats> st(static_cast<size_t>(T));
  std::vector<float> zt(static_cast<size_t>(T));
  chunked_stats(st.data(), zt.data(), hidden, weight, false, targets, T, D, V, inv_temperature);
  finish_loss(loss_per_row, lse, st.data(), zt.data(), targets, T, ignore_index, z_loss_coef);
}

void cross_entropy_fwd(float* loss_per_row, float* lse, const float* hidden, const float* weight,
                       const int32_t* targets, int64_t T, int64_t D, int64_t V,
                       int64_t ignore_index, float z_loss_coef, float inv_temperature) {
  const auto y = widen("cross_entropy_fwd", targets, T);
  cross_entropy_fwd(loss_per_row, lse, hidden, weight, y.data(), T, D, V, ignore_index, z_loss_coef,
                    inv_temperature);
}

void cross_entropy_bwd(float* dhidden, float* dweight, const float* dloss, const float* hidden,
                       const float* weight, const int64_t* targets, const float* lse, int64_t T,
                       int64_t D, int64_t V, int64_t ignore_index, float z_loss_coef,
                       float inv_temperature, bool accumulate_dweight) {
  const Checks ck{"cross_entropy_bwd"};
  ck.sizes(T, D, V);
  ck.ptr("dloss", dloss, T);
  ck.ptr("lse", lse, T);
  ck.fused(T, D, V, hidden, weight, targets, ignore_index, z_loss_coef, inv_temperature);
  if (dweight && !accumulate_dweight) zero_rows(dweight, V, D);
  if (T == 0 || (!dhidden && !dweight)) return;
  auto buf = tile_buffer(T, V);
  for (int64_t c0 = 0; c0 < V; c0 += kVocabChunk) {
    const int64_t n = std::min(kVocabChunk, V - c0);
    for (int64_t r0 = 0; r0 < T; r0 += kCeRowTile) {
      const int64_t rows = std::min(kCeRowTile, T - r0);
      const float* h = hidden + r0 * D;
      gemm_f32(rows, n, D, h, D, weight + c0 * D, D, /*b_trans=*/true, buf.get(), n,
               /*accumulate=*/false);  // the logits again
      chunk_grad(buf.get(), n, dhidden ? dhidden + r0 * D : nullptr, dweight, h, weight, nullptr,
                 targets + r0, lse + r0, dloss + r0, rows, D, c0, n, ignore_index, z_loss_coef,
                 inv_temperature);
    }
  }
}

void cross_entropy_bwd(float* dhidden, float* dweight, const float* dloss, const float* hidden,
                       const float* weight, const int32_t* targets, const float* lse, int64_t T,
                       int64_t D, int64_t V, int64_t ignore_index, float z_loss_coef,
                       float inv_temperature, bool accumulate_dweight) {
  const auto y = widen("cross_entropy_bwd", targets, T);
  cross_entropy_bwd(dhidden, dweight, dloss, hidden, weight, y.data(), lse, T, D, V, ignore_index,
                    z_loss_coef, inv_temperature, accumulate_dweight);
}

int64_t cross_entropy_fused_tile_rows(int64_t T, int64_t V) {
  int64_t by_budget = kCeFusedScratchBytes / (std::max<int64_t>(V, 1) * int64_t{sizeof(float)});
  // Rounded only when the rows do not fit in one tile anyway (T > the budget's rows).
  if (by_budget >= kCeFusedRowQuantum && T > by_budget) by_budget -= by_budget % kCeFusedRowQuantum;
  return std::max<int64_t>(1, std::min({std::max(by_budget, kCeFusedMinRows), T, kCeRowTile}));
}

void cross_entropy_fwd_bwd(float* loss_per_row, float* lse, float* dhidden, float* dweight,
                           const float* dloss, const float* hidden, const float* weight,
                           const int64_t* targets, int64_t T, int64_t D, int64_t V,
                           int64_t ignore_index, float z_loss_coef, float inv_temperature,
                           int64_t packed_weight_max_bytes) {
  const Checks ck{"cross_entropy_fwd_bwd"};
  ck.sizes(T, D, V);
  ck.ptr("loss_per_row", loss_per_row, T);
  ck.ptr("dloss", dloss, T);
  ck.fused(T, D, V, hidden, weight, targets, ignore_index, z_loss_coef, inv_temperature);
  if (dweight) zero_rows(dweight, V, D);
  if (T == 0) return;
  const int64_t R = cross_entropy_fused_tile_rows(T, V);
  HostArray<float> buf(static_cast<size_t>(R * V));  // the tile's logits, then its gradient
  std::vector<VocabStats> st(static_cast<size_t>(R));
  std::vector<float> zt(static_cast<size_t>(R)), tile_lse(static_cast<size_t>(R));
  // Several tiles: weight packed once for all of them (loss.h, packed_weight_max_bytes).
  // Chunk c0's dhidden panels start at Dp * c0 (Dp: D rounded up to the panel width).
  const int64_t Dp = gemm_panels_size(D, 1);
  HostArray<float> wt_logits, wt_dhidden;
  const int64_t packed_bytes =
      (gemm_panels_size(V, D) + (dhidden ? Dp * V : 0)) * int64_t{sizeof(float)};
  if (T > R && packed_bytes <= packed_weight_max_bytes) {
    wt_logits = HostArray<float>(static_cast<size_t>(gemm_panels_size(V, D)));
    gemm_pack_panels(V, D, weight, D, wt_logits.get());
    if (dhidden) {
      wt_dhidden = HostArray<float>(static_cast<size_t>(Dp * V));
      for (int64_t c0 = 0; c0 < V; c0 += kVocabChunk)
        gemm_pack_panels_nn(std::min(kVocabChunk, V - c0), D, weight + c0 * D, D,
                            wt_dhidden.get() + Dp * c0);
    }
  }
  for (int64_t r0 = 0; r0 < T; r0 += R) {
    const int64_t rows = std::min(R, T - r0);
    const float* h = hidden + r0 * D;
    std::fill(zt.begin(), zt.end(), 0.0f);
    for (int64_t c0 = 0; c0 < V; c0 += kVocabChunk)  // all chunks' logits stay in buf
      chunk_stats(st.data(), zt.data(), buf.get() + c0, V, h, wt_logits ? wt_logits.get() : weight,
                  static_cast<bool>(wt_logits), targets + r0, rows, D, c0,
                  std::min(kVocabChunk, V - c0), inv_temperature);
    finish_loss(loss_per_row + r0, tile_lse.data(), st.data(), zt.data(), targets + r0, rows,
                ignore_index, z_loss_coef);
    if (lse) std::copy(tile_lse.begin(), tile_lse.begin() + rows, lse + r0);
    for (int64_t c0 = 0; c0 < V; c0 += kVocabChunk)  // chunks, then tiles, in order
      chunk_grad(buf.get() + c0, V, dhidden ? dhidden + r0 * D : nullptr, dweight, h, weight,
                 wt_dhidden ? wt_dhidden.get() + Dp * c0 : nullptr, targets + r0, tile_lse.data(),
                 dloss + r0, rows, D, c0, std::min(kVocabChunk, V - c0), ignore_index, z_loss_coef,
                 inv_temperature);
  }
}

namespace {
void logprobs_chunked(const char* fn, float* out_logprobs, float* out_lse, const float* hidden,
                      const float* weight, bool panels, const int64_t* targets, int64_t T,
                      int64_t D, int64_t V, float inv_temperature) {
  const Checks ck{fn};
  ck.sizes(T, D, V);
  ck.ptr("out_logprobs", out_logprobs, T);
  ck.fused(T, D, V, hidden, weight, targets, kNoIgnore, 0.0f, inv_temperature);
  std::vector<VocabStats> st(static_cast<size_t>(T));
  std::vector<float> zt(static_cast<size_t>(T));
  chunked_stats(st.data(), zt.data(), hidden, weight, panels, targets, T, D, V, inv_temperature);
  for (int64_t t = 0; t < T; ++t) {
    out_logprobs[t] = vocab_logprob(st[t], zt[t]);
    if (out_lse) out_lse[t] = vocab_lse(st[t]);
  }
}
}  // namespace

void logprobs_from_hidden(float* out_logprobs, float* out_lse, const float* hidden,
                          const float* weight, const int64_t* targets, int64_t T, int64_t D,
                          int64_t V, float inv_temperature) {
  logprobs_chunked("logprobs_from_hidden", out_logprobs, out_lse, hidden, weight, false, targets, T,
                   D, V, inv_temperature);
}

void logprobs_from_hidden_panels(float* out_logprobs, float* out_lse, const float* hidden,
                                 const float* panels, const int64_t* targets, int64_t T, int64_t D,
                                 int64_t V, float inv_temperature) {
  // Chunk c0 then starts at panel c0 / w, i.e. at float c0 · D.
  TITAN_CHECK(kVocabChunk % gemm_panel_width() == 0,
              "logprobs_from_hidden_panels: vocabulary chunks ({}) must start on a GEMM panel ({})",
              kVocabChunk, gemm_panel_width());
  logprobs_chunked("logprobs_from_hidden_panels", out_logprobs, out_lse, hidden, panels, true,
                   targets, T, D, V, inv_temperature);
}

void logprobs_from_hidden(float* out_logprobs, float* out_lse, const float* hidden,
                          const float* weight, const int32_t* targets, int64_t T, int64_t D,
                          int64_t V, float inv_temperature) {
  const auto y = widen("logprobs_from_hidden", targets, T);
  logprobs_from_hidden(out_logprobs, out_lse, hidden, weight, y.data(), T, D, V, inv_temperature);
}

void cross_entropy_logits_fwd(float* loss_per_row, float* lse, const float* logits,
                              const int64_t* targets, int64_t T, int64_t V, int64_t ignore_index,
                              float z_loss_coef, float inv_temperature) {
  const Checks ck{"cross_entropy_logits_fwd"};
  ck.sizes(T, 1, V);
  ck.ptr("loss_per_row", loss_per_row, T);
  ck.ptr("logits", logits, T);
  ck.ptr("targets", targets, T);
  ck.scalars(z_loss_coef, inv_temperature);
  ck.targets(targets, T, V, ignore_index);
  std::vector<VocabStats> st(static_cast<size_t>(T));
  std::vector<float> zt(static_cast<size_t>(T), 0.0f);
  parallel_for(T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      st[t] = vocab_row_stats(logits + t * V, V, inv_temperature);
      if (targets[t] != ignore_index) zt[t] = logits[t * V + targets[t]] * inv_temperature;
    }
  });
  finish_loss(loss_per_row, lse, st.data(), zt.data(), targets, T, ignore_index, z_loss_coef);
}

void cross_entropy_logits_bwd(float* dlogits, const float* dloss, const float* logits,
                              const int64_t* targets, const float* lse, int64_t T, int64_t V,
                              int64_t ignore_index, float z_loss_coef, float inv_temperature) {
  const Checks ck{"cross_entropy_logits_bwd"};
  ck.sizes(T, 1, V);
  ck.ptr("dlogits", dlogits, T);
  ck.ptr("dloss", dloss, T);
  ck.ptr("logits", logits, T);
  ck.ptr("targets", targets, T);
  ck.ptr("lse", lse, T);
  ck.scalars(z_loss_coef, inv_temperature);
  ck.targets(targets, T, V, ignore_index);
  TITAN_DISPATCH(ce_tile_grad, dlogits, V, logits, V, T, 0, V, targets, lse, dloss, ignore_index,
                 z_loss_coef, inv_temperature);
}

}  // namespace titan::kernels::cpu
