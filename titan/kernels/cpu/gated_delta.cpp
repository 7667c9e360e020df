// Gated delta rule and causal conv1d entry points: argument validation and ISA dispatch.
#include "titan/kernels/cpu/gated_delta.h"

#include <cmath>

#include "titan/core/error.h"
#include "titan/kernels/cpu/dispatch.h"

TITAN_DECLARE_ISA(void, gated_delta_fwd,
                  (float* o, float* chunk_states, float* state, const float* q, const float* k,
                   const float* v, const float* g, const float* beta, const int64_t* cu_seqlens,
                   const int64_t* start_pos, const int64_t* slot, const int64_t* snap_slot,
                   const int64_t* snap_pos, int64_t N, int64_t H, int64_t K, int64_t V,
                   bool per_channel, float scale))
TITAN_DECLARE_ISA(void, gated_delta_bwd,
                  (float* dq, float* dk, float* dv, float* dg, float* dbeta, const float* dout,
                   const float* chunk_states, const float* q, const float* k, const float* v,
                   const float* g, const float* beta, const int64_t* cu_seqlens, int64_t N,
                   int64_t H, int64_t K, int64_t V, bool per_channel, float scale))
TITAN_DECLARE_ISA(void, causal_conv1d_fwd,
                  (float* out, float* tail, const float* x, const float* w,
                   const int64_t* cu_seqlens, int64_t N, int64_t C, int64_t W))
TITAN_DECLARE_ISA(void, causal_conv1d_bwd,
                  (float* dx, float* dw, const float* dout, const float* x, const float* w,
                   const int64_t* cu_seqlens, int64_t N, int64_t C, int64_t W))

namespace titan::kernels::cpu {

namespace {

// Largest head dims the chunk kernels take (their per-task scratch is sized by them).
constexpr int64_t kMaxHeadDim = 1024;
constexpr int64_t kMaxConvWidth = 64;

void check_cu(const char* fn, const int64_t* cu, int64_t N) {
  TITAN_CHECK(N >= 0, "{}: N must be >= 0, got {}", fn, N);
  TITAN_CHECK(cu != nullptr, "{}: cu_seqlens must not be null", fn);
  TITAN_CHECK(cu[0] == 0, "{}: cu_seqlens[0] must be 0, got {}", fn, cu[0]);
  for (int64_t n = 0; n < N; ++n)
    TITAN_CHECK(cu[n + 1] >= cu[n], "{}: cu_seqlens must be non-decreasing (cu_seqlens[{}] = {} < "
                "cu_seqlens[{}] = {})", fn, n + 1, cu[n + 1], n, cu[n]);
}

void check_dims(const char* fn, int64_t H, int64_t K, int64_t V) {
  TITAN_CHECK(H >= 1, "{}: H must be >= 1, got {}", fn, H);
  TITAN_CHECK(K >= 1 && K <= kMaxHeadDim, "{}: key head dim K = {} outside [1, {}]", fn, K,
              kMaxHeadDim);
  TITAN_CHECK(V >= 1 && V <= kMaxHeadDim, "{}: value head dim V = {} outside [1, {}]", fn, V,
              kMaxHeadDim);
}

void check_ptr(const char* fn, const char* name, const void* p, int64_t T) {
  TITAN_CHECK(p != nullptr || T == 0, "{}: {} must not be null", fn, name);
}

}  // namespace

int64_t gated_delta_state_floats(int64_t H, int64_t K, int64_t V, bool per_channel) {
  check_dims("gated_delta_state_floats", H, K, V);
  const int64_t Gd = per_channel ? K : 1;
  return H * (K * V + kGatedDeltaChunk * (K + Gd + V));
}

int64_t gated_delta_num_chunks(const int64_t* cu_seqlens, int64_t N) {
  check_cu("gated_delta_num_chunks", cu_seqlens, N);
  int64_t n_chunks = 0;
  for (int64_t n = 0; n < N; ++n)
    n_chunks += (cu_seqlens[n + 1] - cu_seqlens[n] + kGatedDeltaChunk - 1) / kGatedDeltaChunk;
  return n_chunks;
}

void gated_delta_fwd(float* o, float* chunk_states, float* state, const float* q, const float* k,
                     const float* v, const float* g, const float* beta, const int64_t* cu_seqlens,
                     const int64_t* start_pos, int64_t N, int64_t H, int64_t K, int64_t V,
                     bool per_channel, float scale) {
  constexpr const char* fn = "gated_delta_fwd";
  check_cu(fn, cu_seqlens, N);
  check_dims(fn, H, K, V);
  TITAN_CHECK(std::isfinite(scale), "{}: scale must be finite, got {}", fn, scale);
  const int64_t T = cu_seqlens[N];
  for (auto [name, p] : {std::pair{"o", (const void*)o}, {"q", q}, {"k", k}, {"v", v}, {"g", g},
                         {"beta", beta}})
    check_ptr(fn, name, p, T);
  TITAN_CHECK(state == nullptr || chunk_states == nullptr,
              "{}: chunk_states (saved for backward) needs the training layout (state == null)", fn);
  if (start_pos) {
    for (int64_t n = 0; n < N; ++n) {
      TITAN_CHECK(start_pos[n] >= 0, "{}: start_pos[{}] = {} is negative", fn, n, start_pos[n]);
      TITAN_CHECK(state != nullptr || start_pos[n] == 0,
                  "{}: start_pos[{}] = {} without a state slot to resume from", fn, n, start_pos[n]);
    }
  }
  if (N == 0) return;
  TITAN_DISPATCH(gated_delta_fwd, o, chunk_states, state, q, k, v, g, beta, cu_seqlens, start_pos,
                 nullptr, nullptr, nullptr, N, H, K, V, per_channel, scale);
}

void gated_delta_fwd_slots(float* o, float* state, int64_t num_slots, const int64_t* slot,
                           const int64_t* snap_slot, const int64_t* snap_pos, const float* q,
                           const float* k, const float* v, const float* g, const float* beta,
                           const int64_t* cu_seqlens, const int64_t* start_pos, int64_t N,
                           int64_t H, int64_t K, int64_t V, bool per_channel, float scale) {
  constexpr const char* fn = "gated_delta_fwd_slots";
  check_cu(fn, cu_seqlens, N);
  check_dims(fn, H, K, V);
  TITAN_CHECK(std::isfinite(scale), "{}: scale must be finite, got {}", fn, scale);
  const int64_t T = cu_seqlens[N];
  for (auto [name, p] : {std::pair{"o", (const void*)o}, {"q", q}, {"k", k}, {"v", v}, {"g", g},
                         {"beta", beta}})
    check_ptr(fn, name, p, T);
  TITAN_CHECK(state != nullptr && slot != nullptr && start_pos != nullptr,
              "{}: state, slot and start_pos must not be null", fn);
  for (int64_t n = 0; n < N; ++n) {
    TITAN_CHECK(slot[n] >= 0 && slot[n] < num_slots, "{}: slot[{}] = {} is outside [0, {})", fn, n,
                slot[n], num_slots);
    TITAN_CHECK(start_pos[n] >= 0, "{}: start_pos[{}] = {} is negative", fn, n, start_pos[n]);
    for (int64_t m = 0; m < n; ++m)
      TITAN_CHECK(slot[m] != slot[n], "{}: sequences {} and {} share slot {}", fn, m, n, slot[n]);
    if (snap_slot && snap_slot[n] >= 0) {
      TITAN_CHECK(snap_pos != nullptr, "{}: snap_slot without snap_pos", fn);
      TITAN_CHECK(snap_slot[n] < num_slots, "{}: snap_slot[{}] = {} is outside [0, {})", fn, n,
                  snap_slot[n], num_slots);
      TITAN_CHECK(snap_pos[n] >= start_pos[n] && snap_pos[n] <= start_pos[n] + cu_seqlens[n + 1] - cu_seqlens[n],
                  "{}: snap_pos[{}] = {} is outside the sequence's tokens [{}, {}]", fn, n, snap_pos[n],
                  start_pos[n], start_pos[n] + cu_seqlens[n + 1] - cu_seqlens[n]);
      for (int64_t m = 0; m < N; ++m)
        TITAN_CHECK(slot[m] != snap_slot[n], "{}: snap_slot[{}] = {} is the slot of sequence {}", fn, n,
                    snap_slot[n], m);
    }
  }
  if (N == 0) return;
  TITAN_DISPATCH(gated_delta_fwd, o, nullptr, state, q, k, v, g, beta, cu_seqlens, start_pos, slot,
                 snap_slot, snap_pos, N, H, K, V, per_channel, scale);
}

void gated_delta_bwd(float* dq, float* dk, float* dv, float* dg, float* dbeta, const float* dout,
                     const float* chunk_states, const float* q, const float* k, const float* v,
                     const float* g, const float* beta, const int64_t* cu_seqlens, int64_t N,
                     int64_t H, int64_t K, int64_t V, bool per_channel, float scale) {
  constexpr const char* fn = "gated_delta_bwd";
  check_cu(fn, cu_seqlens, N);
  check_dims(fn, H, K, V);
  TITAN_CHECK(std::isfinite(scale), "{}: scale must be finite, got {}", fn, scale);
  const int64_t T = cu_seqlens[N];
  for (auto [name, p] :
       {std::pair{"dq", (const void*)dq}, {"dk", dk}, {"dv", dv}, {"dg", dg}, {"dbeta", dbeta},
        {"dout", dout}, {"chunk_states", chunk_states}, {"q", q}, {"k", k}, {"v", v}, {"g", g},
        {"beta", beta}})
    check_ptr(fn, name, p, T);
  if (N == 0) return;
  TITAN_DISPATCH(gated_delta_bwd, dq, dk, dv, dg, dbeta, dout, chunk_states, q, k, v, g, beta,
                 cu_seqlens, N, H, K, V, per_channel, scale);
}

void causal_conv1d_fwd(float* out, float* tail, const float* x, const float* w,
                       const int64_t* cu_seqlens, int64_t N, int64_t C, int64_t W) {
  constexpr const char* fn = "causal_conv1d_fwd";
  check_cu(fn, cu_seqlens, N);
  TITAN_CHECK(C >= 1, "{}: channels C must be >= 1, got {}", fn, C);
  TITAN_CHECK(W >= 1 && W <= kMaxConvWidth, "{}: conv kernel width {} outside [1, {}]", fn, W,
              kMaxConvWidth);
  const int64_t T = cu_seqlens[N];
  check_ptr(fn, "out", out, T);
  check_ptr(fn, "x", x, T);
  TITAN_CHECK(w != nullptr, "{}: w must not be null", fn);
  TITAN_CHECK(out != x || T == 0, "{}: out must not alias x", fn);
  if (N == 0) return;
  TITAN_DISPATCH(causal_conv1d_fwd, out, tail, x, w, cu_seqlens, N, C, W);
}

void causal_conv1d_bwd(float* dx, float* dw, const float* dout, const float* x, const float* w,
                       const int64_t* cu_seqlens, int64_t N, int64_t C, int64_t W) {
  constexpr const char* fn = "causal_conv1d_bwd";
  check_cu(fn, cu_seqlens, N);
  TITAN_CHECK(C >= 1, "{}: channels C must be >= 1, got {}", fn, C);
  TITAN_CHECK(W >= 1 && W <= kMaxConvWidth, "{}: conv kernel width {} outside [1, {}]", fn, W,
              kMaxConvWidth);
  const int64_t T = cu_seqlens[N];
  check_ptr(fn, "dx", dx, T);
  check_ptr(fn, "dout", dout, T);
  check_ptr(fn, "x", x, T);
  TITAN_CHECK(w != nullptr && dw != nullptr, "{}: w and dw must not be null", fn);
  if (N == 0) {
    for (int64_t i = 0; i < C * W; ++i) dw[i] = 0.0f;
    return;
  }
  TITAN_DISPATCH(causal_conv1d_bwd, dx, dw, dout, x, w, cu_seqlens, N, C, W);
}

}  // namespace titan::kernels::cpu
