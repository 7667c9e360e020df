// Few-row bf16 GEMM on prepacked panels (decode: M <= 8 rows against weights packed by
// gemm_bf16_pack_panels), VDPBF16PS only. The chain of every element is that of
// titan/kernels/cpu/bf16.h (K pairs in ascending order, one VDPBF16PS per pair), so the
// bits equal gemm_bf16_panels' general path; what changes is the loop nest: a task runs
// whole-K columns of several panels at once (independent accumulators: a single panel at
// M = 1 gives only 2 VDPBF16PS chains, latency-bound), reads A from a per-call dword
// copy, and prefetches each panel stream ahead of its reads. Each thread takes a
// contiguous run of panel groups (address order).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/isa/simd.h"

namespace titan::kernels::cpu::TITAN_ISA_NS {

#if defined(TITAN_ISA_AVX512)
namespace {

constexpr int NR = 32;           // the panel width (2 zmm of fp32 columns)
constexpr int64_t kAhead = 24;   // pair rows ahead prefetched in each panel stream (3 KiB)

// Accumulators ROWS x P x 2 <= 16 (+ 2P B vectors + 1 broadcast of the 32 zmm).
constexpr int panels_per_group(int rows) { return rows <= 2 ? 4 : rows <= 4 ? 2 : 1; }

__mmask16 col_mask(int64_t ncols, int64_t col) {
  const int64_t n = std::clamp<int64_t>(ncols - col, 0, 16);
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
}

// C rows [0, ROWS) x columns [0, ncols) (P panels of b, panel stride pw dwords) over all
// KP pairs; a: ROWS rows of KP dwords.
template <int ROWS, int P>
void tile(int64_t KP, const uint32_t* __restrict a, const uint32_t* __restrict b, int64_t pw,
          float* __restrict c, int64_t ldc, int64_t ncols, bool load_c) {
  __m512 acc[ROWS][P][2];
#pragma GCC unroll 16
  for (int r = 0; r < ROWS; ++r)
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p)
#pragma GCC unroll 16
      for (int j = 0; j < 2; ++j) {
        const int64_t col = p * NR + j * 16;
        acc[r][p][j] = load_c ? _mm512_maskz_loadu_ps(col_mask(ncols, col), c + r * ldc + col)
                              : _mm512_setzero_ps();
      }
  for (int64_t q = 0; q < KP; ++q) {
    __m512bh bv[P][2];
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) {
      const uint32_t* bq = b + p * pw + q * NR;
      _mm_prefetch(reinterpret_cast<const char*>(bq + kAhead * NR), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(bq + kAhead * NR + 16), _MM_HINT_T0);
      bv[p][0] = (__m512bh)_mm512_loadu_si512(bq);
      bv[p][1] = (__m512bh)_mm512_loadu_si512(bq + 16);
    }
#pragma GCC unroll 16
    for (int r = 0; r < ROWS; ++r) {
      const __m512bh ar = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[r * KP + q]));
#pragma GCC unroll 16
      for (int p = 0; p < P; ++p) {
        acc[r][p][0] = _mm512_dpbf16_ps(acc[r][p][0], ar, bv[p][0]);
        acc[r][p][1] = _mm512_dpbf16_ps(acc[r][p][1], ar, bv[p][1]);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < ROWS; ++r)
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p)
#pragma GCC unroll 16
      for (int j = 0; j < 2; ++j) {
        const int64_t col = p * NR + j * 16;
        const __mmask16 m = col_mask(ncols, col);
        if (m) _mm512_mask_storeu_ps(c + r * ldc + col, m, acc[r][p][j]);
      }
}

template <int ROWS>
void run_rows(int64_t N, int64_t KP, const uint32_t* a, const uint32_t* Bp, float* C, int64_t ldc,
              bool accumulate) {
  constexpr int P = panels_per_group(ROWS);
  const int64_t pw = KP * NR, panels = (N + NR - 1) / NR, groups = (panels + P - 1) / P;
  parallel_for(groups, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t j = g * P, ncols = std::min<int64_t>(N - j * NR, P * NR);
      const uint32_t* b = Bp + j * pw;
      float* c = C + j * NR;
      switch ((ncols + NR - 1) / NR) {
        case 1: tile<ROWS, 1>(KP, a, b, pw, c, ldc, ncols, accumulate); break;
        case 2: if constexpr (P >= 2) tile<ROWS, 2>(KP, a, b, pw, c, ldc, ncols, accumulate); break;
        case 3: if constexpr (P >= 3) tile<ROWS, 3>(KP, a, b, pw, c, ldc, ncols, accumulate); break;
        default: if constexpr (P >= 4) tile<ROWS, 4>(KP, a, b, pw, c, ldc, ncols, accumulate); break;
      }
    }
  });
}

}  // namespace

bool gemm_bf16_panels_rows(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                           const uint32_t* Bp, float* C, int64_t ldc, bool accumulate) {
  if (M < 1 || M > 8 || N < 1 || K < 1) return false;
  const int64_t KP = (K + 1) / 2;
  std::vector<uint32_t> a(static_cast<size_t>(M * KP));  // row m's pairs: lo = even, hi = odd
  for (int64_t m = 0; m < M; ++m)
    for (int64_t q = 0; q < KP; ++q) {
      const uint32_t lo = A[m * lda + 2 * q], hi = 2 * q + 1 < K ? A[m * lda + 2 * q + 1] : 0u;
      a[static_cast<size_t>(m * KP + q)] = lo | hi << 16;
    }
  switch (M) {
    case 1: run_rows<1>(N, KP, a.data(), Bp, C, ldc, accumulate); break;
    case 2: run_rows<2>(N, KP, a.data(), Bp, C, ldc, accumulate); break;
    case 3: run_rows<3>(N, KP, a.data(), Bp, C, ldc, accumulate); break;
    case 4: run_rows<4>(N, KP, a.data(), Bp, C, ldc, accumulate); break;
    case 5: run_rows<5>(N, KP, a.data(), Bp, C, ldc, accumulate); break;
    case 6: run_rows<6>(N, KP, a.data(), Bp, C, ldc, accumulate); break;
    case 7: run_rows<7>(N, KP, a.data(), Bp, C, ldc, accumulate); break;
    default: run_rows<8>(N, KP, a.data(), Bp, C, ldc, accumulate); break;
  }
  return true;
}

#else

// No VDPBF16PS on this ISA: the general path runs.
bool gemm_bf16_panels_rows(int64_t, int64_t, int64_t, const uint16_t*, int64_t, const uint32_t*, float*,
                           int64_t, bool) {
  return false;
}

#endif

}  // namespace titan::kernels::cpu::TITAN_ISA_NS
