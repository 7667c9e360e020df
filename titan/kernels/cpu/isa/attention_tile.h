// Internal to the attention kernels (isa/attention_*.cpp, compiled once per ISA): the
// per-query-tile building blocks that the packed (trainer) and the paged (generator)
// paths share. Every function computes each query row's numbers with the same
// arithmetic whatever the other rows of the tile are, so a row's bits depend only on
// its own q, its position and the K/V blocks it reads.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#ifndef TITAN_ISA_NS
#error "attention_tile.h is for titan/kernels/cpu/isa/*.cpp only"
#endif

namespace titan::kernels::cpu::TITAN_ISA_NS::attn {

inline constexpr int kMaxRows = 64;  // query rows per tile (most)
inline constexpr int kMaxB = 256;    // largest KV block size
inline constexpr int kMaxDh = 256;   // largest head dim

struct Cfg {
  int Dh = 0;
  int B = 0;           // KV block size (multiple of 16)
  float scale = 0.0f;  // applied to the raw dot product
  int window = 0;      // 0 = off
  int chunk = 0;       // chunked local attention; 0 = off
  float softcap = 0.0f;
  float inv_softcap = 0.0f;  // 1 / softcap, rounded to fp32 once
};

// First visible key position for a query at position p (the last one is p): the
// window's start and the start of p's chunk, whichever is later. Non-decreasing in p.
inline int first_visible(int p, int window, int chunk) {
  int lo = window > 0 ? std::max(0, p - window + 1) : 0;
  if (chunk > 0) lo = std::max(lo, p / chunk * chunk);
  return lo;
}
// The last query position that can see key position j (a query sees j iff
// first_visible(p) <= j <= p), capped at L - 1.
inline int last_seeing(int j, int window, int chunk, int L) {
  int hi = L - 1;
  if (window > 0) hi = std::min(hi, j + window - 1);
  if (chunk > 0) hi = std::min(hi, (j / chunk + 1) * chunk - 1);
  return hi;
}

// One query row of a forward tile. sink = -inf when there is none.
struct QRow {
  const float* q;  // (Dh)
  float* out;      // (Dh)
  float* lse;      // scalar or null
  int pos;         // position within the sequence
  float sink;
};

// Forward of R <= kMaxRows query rows that read the same KV sequence/head.
// kblk[b]: block b's K as [Dh][B]; vblk[b]: block b's V row 0, rows v_stride apart.
// Only blocks a row can see are read (kblk/vblk entries outside are not touched).
void fwd_tile(const QRow* rows, int R, const float* const* kblk, const float* const* vblk,
              int64_t v_stride, const Cfg& c);

// s[r][j] = scale * sum_{d ascending} x[r][d] * kt[d * B + j], j < B, r < R (any R).
void block_dots(float* const* s, const float* const* x, int R, const float* kt, int Dh, int B,
                float scale);

// In place on one row of B scores: optional soft-cap (tanh of s/cap stored to th if
// th is not null), then lanes outside [jlo, jhi] set to -inf.
void cap_mask(float* s, float* th, int jlo, int jhi, const Cfg& c);

// p[j] = exp(s[j] - shift) for j < B (masked -inf lanes give exactly 0).
void exp_shift(float* p, const float* s, float shift, int B);

// acc[r][:Dh] = acc[r] * alpha[r] + sum_{j = jlo[r] .. jhi[r] ascending} coef[r][j] * x[j][:Dh]
// for r < R (any R); rows with equal ranges are processed in pairs (same arithmetic).
void axpy_rows(float* const* acc, const float* alpha, const float* const* coef, const int* jlo,
               const int* jhi, int R, const float* const* x, int Dh);

// Fixed-order dot product of two Dh vectors (vector FMA chain per lane, one hsum).
float dot(const float* a, const float* b, int Dh);

// Scalar exp through THE vector exp (simd::vexp).
float exp1(float x);

// Runs fn(u) for every unit u < costs.size() on num_threads() threads: units are
// assigned to threads by a static longest-first greedy on their estimated costs
// (inline when the total is small).
// Each unit must own its outputs; which thread runs it does not change its bits.
void run_balanced(const std::vector<double>& costs, const std::function<void(int64_t)>& fn);

}  // namespace titan::kernels::cpu::TITAN_ISA_NS::attn
