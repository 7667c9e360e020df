// bf16 GEMM with fp32 accumulation (per ISA). The contract (the exact chain per
// element, DAZ/FTZ) is in titan/kernels/cpu/bf16.h; this file holds the packing, the two
// microkernels and the loop nest.
//
// Packed B (both paths): panel j = columns [j * NR, j * NR + NR) as KP = ceil(K / 2)
// rows of NR dwords, dword (p, n) = b[2p][n] | b[2p + 1][n] << 16 (zero past N and K),
// panels back to back. It is also the layout of weights repacked for decode
// (gemm_bf16_pack_panels), which are then read in place.
// Packed A, per task and K chunk of KCP pairs, MR-row panels (zero past M and K):
//  - instruction (VDPBF16PS): kcp rows of MR dwords, the same pairing. One VDPBF16PS
//    per (row, W columns, pair) adds the odd then the even product;
//  - emulation: 2 kcp rows of MR floats, step 2p holds a[2p + 1] and step 2p + 1 holds
//    a[2p] (widened). The kernel widens each B dword into its odd (high half) and even
//    (low half) fp32 values and runs one FMA per element of the pair in that order,
//    under MXCSR DAZ|FTZ.
// Each task runs an MR x NR tile of C in registers over each B micro-panel. K chunks
// store and reload the fp32 partial in C (no bit changes).
#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include "titan/core/dtype.h"
#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/isa/simd.h"

namespace titan::kernels::cpu::TITAN_ISA_NS {
using namespace simd;

namespace {

constexpr int NV = 2;       // vectors per C-tile row
constexpr int NR = NV * W;  // 16 (AVX2), 32 (AVX-512)
#if defined(TITAN_ISA_AVX512)
constexpr int MR = 14;  // 28 zmm accumulators + 2 B + 1 broadcast
constexpr int64_t MC = MR * 16;
#else
constexpr int MR = 6;  // 12 ymm accumulators + 2 B + 1 broadcast
constexpr int64_t MC = MR * 12;
#endif
constexpr int64_t KCP = 256;  // K pairs per chunk: B micro-panel 32 (AVX2) / 64 KiB

// MXCSR with DAZ (bit 6) and FTZ (bit 15) set while the emulation runs; restored after.
struct DazFtz {
  unsigned old;
  DazFtz() : old(_mm_getcsr()) { _mm_setcsr(old | 0x8040u); }
  ~DazFtz() { _mm_setcsr(old); }
  DazFtz(const DazFtz&) = delete;
  DazFtz& operator=(const DazFtz&) = delete;
};

struct Prob {
  int64_t M, N, K, KP;
  const uint16_t* A;
  int64_t lda;
  bool a_trans;
  const uint16_t* B;
  int64_t ldb;
  bool b_trans;
  float* C;
  int64_t ldc;
  bool accumulate;
};

inline uint32_t a_at(const Prob& p, int64_t m, int64_t k) {
  if (k >= p.K) return 0;
  return p.a_trans ? p.A[k * p.lda + m] : p.A[m * p.lda + k];
}
inline uint32_t b_at(const Prob& p, int64_t k, int64_t n) {
  if (k >= p.K) return 0;
  return p.b_trans ? p.B[n * p.ldb + k] : p.B[k * p.ldb + n];
}
inline float widen(uint32_t h) { return bits_f32(h << 16); }

inline int lanes(int nv, int j) { return std::clamp(nv - j * W, 0, W); }

struct FreeDeleter {
  void operator()(uint32_t* q) const { std::free(q); }
};
struct Buffer {
  std::unique_ptr<uint32_t, FreeDeleter> q;
  size_t size = 0;
  uint32_t* get(size_t n) {
    if (n > size) {
      q.reset(static_cast<uint32_t*>(std::aligned_alloc(64, (4 * n + 63) / 64 * 64)));
      size = n;
    }
    return q.get();
  }
};
Buffer& a_buffer() {
  thread_local Buffer b;
  return b;
}
Buffer& b_buffer() {
  thread_local Buffer b;
  return b;
}

// Dwords of one packed B panel.
inline int64_t panel_words(const Prob& p) { return p.KP * NR; }

// Packs B panel j into dst (panel_words dwords).
void pack_b_panel(const Prob& p, int64_t j, uint32_t* dst) {
  const int64_t n0 = j * NR;
  for (int64_t n = 0; n < NR; ++n) {
    const int64_t col = n0 + n;
    for (int64_t q = 0; q < p.KP; ++q) {
      const uint32_t e = col < p.N ? b_at(p, 2 * q, col) : 0;
      const uint32_t o = col < p.N ? b_at(p, 2 * q + 1, col) : 0;
      dst[q * NR + n] = e | (o << 16);
    }
  }
}

// Packs rows [m0, m0 + mc) x pairs [q0, q0 + kcp) of A into MR-row panels at dst.
void pack_a_block(const Prob& p, bool dp, int64_t m0, int64_t mc, int64_t q0, int64_t kcp,
                  uint32_t* dst) {
  for (int64_t i0 = 0; i0 < mc; i0 += MR, dst += (dp ? 1 : 2) * kcp * MR)
    for (int r = 0; r < MR; ++r) {
      const bool real = i0 + r < mc;
      const int64_t m = m0 + i0 + r;
      for (int64_t q = 0; q < kcp; ++q) {
        const uint32_t e = real ? a_at(p, m, 2 * (q0 + q)) : 0;
        const uint32_t o = real ? a_at(p, m, 2 * (q0 + q) + 1) : 0;
        if (dp) {
          dst[q * MR + r] = e | (o << 16);
        } else {
          dst[(2 * q) * MR + r] = o << 16;
          dst[(2 * q + 1) * MR + r] = e << 16;
        }
      }
    }
}

// The odd (high half) and even (low half) bf16 of each dword, widened to fp32.
#if defined(TITAN_ISA_AVX512)
inline vf odd_half(__m512i d) { return _mm512_castsi512_ps(_mm512_and_si512(d, _mm512_set1_epi32(int(0xffff0000u)))); }
inline vf even_half(__m512i d) { return _mm512_castsi512_ps(_mm512_slli_epi32(d, 16)); }
inline __m512i load_dw(const uint32_t* p) { return _mm512_loadu_si512(p); }
#else
inline vf odd_half(__m256i d) { return _mm256_castsi256_ps(_mm256_and_si256(d, _mm256_set1_epi32(int(0xffff0000u)))); }
inline vf even_half(__m256i d) { return _mm256_castsi256_ps(_mm256_slli_epi32(d, 16)); }
inline __m256i load_dw(const uint32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
#endif

// Emulation tile: ROWS x NR of C over kcp pairs: per pair, c = fma(a_odd, b_odd, c) then
// c = fma(a_even, b_even, c) (a: 2 kcp steps of MR floats; b: kcp rows of NR dwords);
// run under DazFtz.
template <int ROWS>
void micro_emu(int64_t kcp, const float* __restrict a, const uint32_t* __restrict b,
               float* __restrict c, int64_t ldc, int nv, bool load_c) {
  vf acc[ROWS][NV];
#pragma GCC unroll 16
  for (int r = 0; r < ROWS; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j)
      acc[r][j] = !load_c ? zero() : nv == NR ? load(c + r * ldc + j * W)
                                              : load_n(c + r * ldc + j * W, lanes(nv, j));
#pragma GCC unroll 2
  for (int64_t q = 0; q < kcp; ++q) {
    vf bo[NV], be[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) {
      const auto d = load_dw(b + j * W);
      bo[j] = odd_half(d);
      be[j] = even_half(d);
    }
#pragma GCC unroll 16
    for (int r = 0; r < ROWS; ++r) {
      const vf ao = set1(a[r]), ae = set1(a[MR + r]);
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[r][j] = fmadd(ae, be[j], fmadd(ao, bo[j], acc[r][j]));
    }
    a += 2 * MR;
    b += NR;
  }
#pragma GCC unroll 16
  for (int r = 0; r < ROWS; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) {
      if (nv == NR)
        store(c + r * ldc + j * W, acc[r][j]);
      else if (lanes(nv, j) > 0)
        store_n(c + r * ldc + j * W, acc[r][j], lanes(nv, j));
    }
}

#if defined(TITAN_ISA_AVX512)
// Instruction tile: ROWS x NR of C += kcp pairs, one VDPBF16PS per row, vector, pair.
// Only called when the CPU has AVX512_BF16 (bf16_dot() / gemm_bf16_on check it).
template <int ROWS>
void micro_dp(int64_t kcp, const uint32_t* __restrict a, const uint32_t* __restrict b,
              float* __restrict c, int64_t ldc, int nv, bool load_c) {
  __m512 acc[ROWS][NV];
#pragma GCC unroll 16
  for (int r = 0; r < ROWS; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j)
      acc[r][j] = !load_c ? zero() : nv == NR ? load(c + r * ldc + j * W)
                                              : load_n(c + r * ldc + j * W, lanes(nv, j));
#pragma GCC unroll 4
  for (int64_t q = 0; q < kcp; ++q) {
    __m512bh bv[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) bv[j] = (__m512bh)_mm512_loadu_si512(b + j * W);
#pragma GCC unroll 16
    for (int r = 0; r < ROWS; ++r) {
      const __m512bh ar = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[r]));
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], ar, bv[j]);
    }
    a += MR;
    b += NR;
  }
#pragma GCC unroll 16
  for (int r = 0; r < ROWS; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) {
      if (nv == NR)
        store(c + r * ldc + j * W, acc[r][j]);
      else if (lanes(nv, j) > 0)
        store_n(c + r * ldc + j * W, acc[r][j], lanes(nv, j));
    }
}
#endif

using EmuFn = void (*)(int64_t, const float*, const uint32_t*, float*, int64_t, int, bool);
template <size_t... I>
constexpr auto emu_table(std::index_sequence<I...>) {
  return std::array<EmuFn, sizeof...(I)>{&micro_emu<static_cast<int>(I) + 1>...};
}
constexpr auto kEmu = emu_table(std::make_index_sequence<MR>{});
#if defined(TITAN_ISA_AVX512)
using DpFn = void (*)(int64_t, const uint32_t*, const uint32_t*, float*, int64_t, int, bool);
template <size_t... I>
constexpr auto dp_table(std::index_sequence<I...>) {
  return std::array<DpFn, sizeof...(I)>{&micro_dp<static_cast<int>(I) + 1>...};
}
constexpr auto kDp = dp_table(std::make_index_sequence<MR>{});
#endif

// Rows [m0, m1) x panels [j0, j1) of C, all of K, from the packed B at bp.
void run_task(const Prob& p, bool dp, const uint32_t* bp, int64_t m0, int64_t m1, int64_t j0,
              int64_t j1) {
  const DazFtz fp;
  const int64_t mc = m1 - m0, wpp = dp ? 1 : 2;
  uint32_t* abuf = a_buffer().get(static_cast<size_t>((mc + MR - 1) / MR * MR * wpp * KCP));
  for (int64_t q0 = 0; q0 < p.KP; q0 += KCP) {
    const int64_t kcp = std::min(KCP, p.KP - q0);
    const bool load_c = p.accumulate || q0 > 0;
    pack_a_block(p, dp, m0, mc, q0, kcp, abuf);
    for (int64_t j = j0; j < j1; ++j) {
      const int nv = static_cast<int>(std::min<int64_t>(NR, p.N - j * NR));
      const uint32_t* b = bp + j * panel_words(p) + q0 * NR;
      for (int64_t i0 = 0; i0 < mc; i0 += MR) {
        const int rows = static_cast<int>(std::min<int64_t>(MR, mc - i0));
        const uint32_t* a = abuf + i0 * wpp * kcp;
        float* c = p.C + (m0 + i0) * p.ldc + j * NR;
#if defined(TITAN_ISA_AVX512)
        if (dp) {
          kDp[rows - 1](kcp, a, b, c, p.ldc, nv, load_c);
          continue;
        }
#endif
        kEmu[rows - 1](kcp, reinterpret_cast<const float*>(a), b, c, p.ldc, nv, load_c);
      }
    }
  }
}

// All row blocks x column blocks of C from the packed B at bp (tasks: row blocks of MC
// rows x column blocks of whole panels, enough tasks for every thread when there are
// few row blocks). Who runs a task never changes its bits.
void run_all(const Prob& p, bool dp, const uint32_t* bp) {
  const int64_t panels = (p.N + NR - 1) / NR;
  const int64_t T = num_threads(), rblocks = (p.M + MC - 1) / MC;
  const int64_t cblocks = std::clamp<int64_t>((2 * T + rblocks - 1) / rblocks, 1, panels);
  parallel_for(rblocks * cblocks, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t rb = t / cblocks, cb = t % cblocks;
      run_task(p, dp, bp, rb * MC, std::min(p.M, rb * MC + MC), panels * cb / cblocks,
               panels * (cb + 1) / cblocks);
    }
  });
}

// C for K = 0 (zeros unless accumulating); false when there is work to do.
bool trivial(int64_t M, int64_t N, int64_t K, float* C, int64_t ldc, bool accumulate) {
  if (M == 0 || N == 0) return true;
  if (K > 0) return false;
  if (!accumulate)
    for (int64_t m = 0; m < M; ++m) std::memset(C + m * ldc, 0, sizeof(float) * static_cast<size_t>(N));
  return true;
}

}  // namespace

// dp: use VDPBF16PS (AVX-512 build only; the caller checked the CPU has it).
void gemm_bf16_run(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool a_trans,
                   const uint16_t* B, int64_t ldb, bool b_trans, float* C, int64_t ldc,
                   bool accumulate, bool dp) {
#if !defined(TITAN_ISA_AVX512)
  dp = false;
#endif
  if (trivial(M, N, K, C, ldc, accumulate)) return;
  const Prob p{M, N, K, (K + 1) / 2, A, lda, a_trans, B, ldb, b_trans, C, ldc, accumulate};
  const int64_t panels = (N + NR - 1) / NR, words = panel_words(p);
  uint32_t* bp = b_buffer().get(static_cast<size_t>(panels * words));
  parallel_for(panels, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) pack_b_panel(p, j, bp + j * words);
  });
  run_all(p, dp, bp);
}

int64_t gemm_bf16_panel_width() { return NR; }

// W (N, K) bf16, row stride ldw -> the packed-B panels (ceil(N / NR) * ceil(K / 2) * NR dwords).
void gemm_bf16_pack_panels(int64_t N, int64_t K, const uint16_t* W, int64_t ldw, uint32_t* dst) {
  const Prob p{0, N, K, (K + 1) / 2, nullptr, 1, false, W, ldw, true, nullptr, 1, false};
  const int64_t panels = (N + NR - 1) / NR, words = panel_words(p);
  parallel_for(panels, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) pack_b_panel(p, j, dst + j * words);
  });
}

// C (M, N) [+]= A (M, K) bf16 · W from its packed panels Bp.
void gemm_bf16_panels_run(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                          const uint32_t* Bp, float* C, int64_t ldc, bool accumulate, bool dp) {
#if !defined(TITAN_ISA_AVX512)
  dp = false;
#endif
  if (trivial(M, N, K, C, ldc, accumulate)) return;
  const Prob p{M, N, K, (K + 1) / 2, A, lda, false, nullptr, 1, true, C, ldc, accumulate};
  run_all(p, dp, Bp);
}

}  // namespace titan::kernels::cpu::TITAN_ISA_NS
