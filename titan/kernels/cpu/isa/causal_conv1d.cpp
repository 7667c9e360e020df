// Short causal depthwise conv1d, forward and backward (per ISA). See
// titan/kernels/cpu/gated_delta.h. Lanes run across channels; every output element is
// one FMA chain over the W taps in ascending order, with a missing input (before the
// sequence, no tail) read as +0.0 exactly as a zero tail would be, so a decode step
// that reads the tail computes the trainer's bits.
#include <algorithm>
#include <cstring>
#include <vector>

#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/gated_delta.h"
#include "titan/kernels/cpu/isa/reduce.h"

namespace titan::kernels::cpu::TITAN_ISA_NS {
using namespace simd;

namespace {

constexpr int64_t kConvBlock = 64;  // tokens per dw partial (fixed summation order)
constexpr int64_t kMaxConvWidth = 64;  // = the entry point's limit

// Sequence index of packed token t (cu non-decreasing, cu[0] = 0, t < cu[N]).
inline int64_t seq_of(const int64_t* cu, int64_t N, int64_t t) {
  return std::upper_bound(cu + 1, cu + N + 1, t) - (cu + 1);
}

// (W, C) transpose of w (C, W).
std::vector<float> taps_major(const float* w, int64_t C, int64_t W) {
  std::vector<float> wt(W * C);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < W; ++i) wt[i * C + c] = w[c * W + i];
  return wt;
}

}  // namespace

void causal_conv1d_fwd(float* out, float* tail, const float* x, const float* w,
                       const int64_t* cu_seqlens, int64_t N, int64_t C, int64_t W) {
  const int64_t T = cu_seqlens[N];
  const std::vector<float> wt = taps_major(w, C, W);
  parallel_for_grain(T, row_grain(C * W), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n = seq_of(cu_seqlens, N, t);
      const int64_t s = t - cu_seqlens[n];
      const float* src[kMaxConvWidth];
      for (int64_t i = 0; i < W; ++i) {
        const int64_t at = s - (W - 1) + i;  // position within the sequence
        if (at >= 0) src[i] = x + (cu_seqlens[n] + at) * C;
        else if (tail) src[i] = tail + (n * (W - 1) + (W - 1) + at) * C;
        else src[i] = nullptr;
      }
      for_vectors(C, [&](int64_t j, int c) {
        vf acc = zero();
        for (int64_t i = 0; i < W; ++i) {
          const vf xv = src[i] ? load_c(src[i] + j, c, 0.0f) : zero();
          acc = i == 0 ? mul(load_c(wt.data() + i * C + j, c, 0.0f), xv)
                       : fmadd(load_c(wt.data() + i * C + j, c, 0.0f), xv, acc);
        }
        store_c(out + t * C + j, acc, c);
      });
    }
  });
  if (!tail || W == 1) return;
  // New tail: the last W−1 inputs of each sequence (older tail rows shift forward).
  std::vector<float> nt((W - 1) * C);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t len = cu_seqlens[n + 1] - cu_seqlens[n];
    float* tl = tail + n * (W - 1) * C;
    for (int64_t r = 0; r < W - 1; ++r) {
      const int64_t at = len - (W - 1) + r;  // position of tail row r after this call
      const float* srcp = at >= 0 ? x + (cu_seqlens[n] + at) * C : tl + (W - 1 + at) * C;
      std::memcpy(nt.data() + r * C, srcp, sizeof(float) * C);
    }
    std::memcpy(tl, nt.data(), sizeof(float) * (W - 1) * C);
  }
}

void causal_conv1d_bwd(float* dx, float* dw, const float* dout, const float* x, const float* w,
                       const int64_t* cu_seqlens, int64_t N, int64_t C, int64_t W) {
  const int64_t T = cu_seqlens[N];
  const std::vector<float> wt = taps_major(w, C, W);
  parallel_for_grain(T, row_grain(C * W), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n = seq_of(cu_seqlens, N, t);
      const int64_t s = t - cu_seqlens[n];
      const int64_t len = cu_seqlens[n + 1] - cu_seqlens[n];
      for_vectors(C, [&](int64_t j, int c) {
        vf acc = zero();
        for (int64_t i = 0; i < W; ++i) {
          const int64_t o = s + (W - 1) - i;  // output that reads x[s] through tap i
          if (o >= len) continue;
          acc = fmadd(load_c(wt.data() + i * C + j, c, 0.0f),
                      load_c(dout + (cu_seqlens[n] + o) * C + j, c, 0.0f), acc);
        }
        store_c(dx + t * C + j, acc, c);
      });
    }
  });
  // dw: per 64-token block partials (W, C), summed in block order.
  const int64_t nb = (T + kConvBlock - 1) / kConvBlock;
  std::vector<float> part(std::max<int64_t>(nb, 1) * W * C, 0.0f);
  parallel_for(nb, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      float* p = part.data() + b * W * C;
      const int64_t e = std::min(T, (b + 1) * kConvBlock);
      for (int64_t t = b * kConvBlock; t < e; ++t) {
        const int64_t n = seq_of(cu_seqlens, N, t);
        const int64_t s = t - cu_seqlens[n];
        for (int64_t i = 0; i < W; ++i) {
          const int64_t at = s - (W - 1) + i;
          if (at < 0) continue;
          const float* xr = x + (cu_seqlens[n] + at) * C;
          for_vectors(C, [&](int64_t j, int c) {
            store_c(p + i * C + j,
                    fmadd(load_c(dout + t * C + j, c, 0.0f), load_c(xr + j, c, 0.0f),
                          load_c(p + i * C + j, c, 0.0f)),
                    c);
          });
        }
      }
    }
  });
  for (int64_t i = 1; i < nb; ++i)
    for_vectors(W * C, [&](int64_t j, int c) {
      store_c(part.data() + j, add(load_c(part.data() + j, c, 0.0f), load_c(part.data() + i * W * C + j, c, 0.0f)), c);
    });
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < W; ++i) dw[c * W + i] = part[i * C + c];
}

}  // namespace titan::kernels::cpu::TITAN_ISA_NS
