// bf16 GEMM with fp32 accumulation (per ISA). The contract (the exact chain per
// element, DAZ/FTZ) is in titan/kernels/cpu/bf16.h; this file holds the packing, the two
// microkernels and the loop nest. Packing only moves 16-bit halves into dwords (integer
// moves, vectorised with 8 x 8 dword transposes and halfword interleaves), so it never
// changes the order of the products or a bit of an operand.
//
// Packed B (both paths): a micro-panel = NR columns as kcp rows of NR dwords, dword
// (p, n) = b[2p][n] | b[2p + 1][n] << 16 (zero past N and K). Weights repacked for
// decode (gemm_bf16_pack_panels) are whole-K panels in this layout, back to back, read
// in place. Otherwise B is packed per block of NC columns x KCP pairs, shared by the
// threads (run_blocked).
// Packed A, per task and K chunk of KCP pairs, MR-row panels:
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
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "titan/core/dtype.h"
#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/isa/gemm_pack.h"
#include "titan/kernels/cpu/isa/simd.h"

namespace titan::kernels::cpu::TITAN_ISA_NS {
using namespace simd::native;  // lane-wise: one FMA chain per element of C (simd.h)

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
constexpr int64_t KCP = 256;  // K pairs per chunk: B micro-panel 16 (AVX2) / 32 KiB, in L1
constexpr int64_t NC = 2048;  // columns per shared B block: KCP x NC dwords = 2 MiB, in L2 / L3
// Up to this many bytes of packed B, run_blocked packs all of B at once and runs the
// whole-K tasks of run_panels, whose C tiles stay in L2 across the K chunks (a K x N
// block order reloads all of C from memory once per chunk). 3 MiB: the dX and forward
// products of a `small` step (1.5 MiB) take it; dW (B = 4096 tokens x 512: 4 MiB) ran
// 0-10 % slower with it (gemm_bf16_bench BM_train, 1 thread).
constexpr int64_t kWholeB = int64_t{3} << 20;

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

// ---- Packing (integer moves only: the layout changes, never a bit of an operand).
// 8 x 8 dword blocks are transposed in 256-bit registers (both builds have AVX2).
inline __m256i loadu8(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline void storeu8(uint32_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
inline void transpose8(__m256i r[8]) {
  __m256 f[8];
  for (int i = 0; i < 8; ++i) f[i] = _mm256_castsi256_ps(r[i]);
  gemm_pack::transpose8(f);
  for (int i = 0; i < 8; ++i) r[i] = _mm256_castps_si256(f[i]);
}
// Dword i = e[i] | o[i] << 16 for 8 halfwords e, o (128-bit each).
inline __m256i interleave8(__m128i e, __m128i o) {
  return _mm256_set_m128i(_mm_unpackhi_epi16(e, o), _mm_unpacklo_epi16(e, o));
}
inline __m128i loadu4(const uint16_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

// Pair q of A row m / B column n as one dword (zero past K).
inline uint32_t a_pair(const Prob& p, int64_t m, int64_t q) { return a_at(p, m, 2 * q) | a_at(p, m, 2 * q + 1) << 16; }
inline uint32_t b_pair(const Prob& p, int64_t q, int64_t n) { return b_at(p, 2 * q, n) | b_at(p, 2 * q + 1, n) << 16; }
// Pairs of [q0, q0 + kcp) with both elements inside K, counted from q0.
inline int64_t full_pairs(const Prob& p, int64_t q0, int64_t kcp) { return std::clamp<int64_t>(p.K / 2 - q0, 0, kcp); }

// B "NT" micro-panel: columns [n0, n0 + NR) x pairs [q0, q0 + kcp) -> dst, kcp rows of
// NR dwords (zero past N and K). 8 columns x 8 pairs per transpose.
void pack_b_nt(const Prob& p, int64_t n0, int64_t q0, int64_t kcp, uint32_t* dst) {
  const int64_t full = full_pairs(p, q0, kcp);
  for (int g = 0; g < NR / 8; ++g) {
    const int64_t c0 = n0 + 8 * g;
    int64_t q = 0;
    if (c0 + 8 <= p.N)
      for (; q + 8 <= full; q += 8) {
        __m256i r[8];
        for (int i = 0; i < 8; ++i) r[i] = loadu8(p.B + (c0 + i) * p.ldb + 2 * (q0 + q));
        transpose8(r);
        for (int i = 0; i < 8; ++i) storeu8(dst + (q + i) * NR + 8 * g, r[i]);
      }
    for (; q < kcp; ++q)
      for (int i = 0; i < 8; ++i)
        dst[q * NR + 8 * g + i] = c0 + i < p.N ? b_pair(p, q0 + q, c0 + i) : 0;
  }
}

// B "NN" block rows: pairs [qa, qb) of the (kcp pairs x nc columns) block at columns jc,
// pairs from q0, into the block's micro-panels (panel j at blk + j * kcp * NR). Each
// pair interleaves two B rows read in address order.
void pack_b_nn_rows(const Prob& p, int64_t jc, int64_t nc, int64_t q0, int64_t kcp, int64_t qa,
                    int64_t qb, uint32_t* blk) {
  const int64_t panels = (nc + NR - 1) / NR;
  for (int64_t q = qa; q < qb; ++q) {
    const int64_t k = 2 * (q0 + q);
    const uint16_t* e = p.B + k * p.ldb + jc;
    const uint16_t* o = k + 1 < p.K ? e + p.ldb : nullptr;
    for (int64_t j = 0; j < panels; ++j) {
      uint32_t* d = blk + j * kcp * NR + q * NR;
      const int64_t nv = std::min<int64_t>(NR, nc - j * NR);
      const uint16_t* ej = e + j * NR;
      const uint16_t* oj = o ? o + j * NR : nullptr;
      int64_t n = 0;
      for (; n + 8 <= nv; n += 8)
        storeu8(d + n, interleave8(loadu4(ej + n), oj ? loadu4(oj + n) : _mm_setzero_si128()));
      for (; n < NR; ++n) d[n] = n < nv ? (uint32_t{ej[n]} | (oj ? uint32_t{oj[n]} << 16 : 0u)) : 0u;
    }
  }
}

// Stores 8 row dwords of pair q, rows [8 g, 8 g + 8) of an MR-row A panel: dp as they
// are (row q of the panel), emulation widened into rows 2q (odd halves) and 2q + 1
// (even halves). Only the panel's MR rows are written on AVX-512 (masked); on AVX2 (MR
// = 6, one group) the 2 extra lanes land in the next row's first slots, which the next
// store overwrites (pairs are stored in ascending order; the buffer has slack after
// the last panel).
inline void store_rows(uint32_t* dst, bool dp, int64_t q, int g, __m256i v) {
  auto put = [&](uint32_t* at, __m256i x) {
#if defined(TITAN_ISA_AVX512)
    constexpr int tail = MR - 8;  // lanes of the second group
    if (g == 1)
      _mm256_mask_storeu_epi32(at, static_cast<__mmask8>((1u << tail) - 1u), x);
    else
      storeu8(at, x);
#else
    storeu8(at, x);
#endif
  };
  if (dp) {
    put(dst + q * MR + 8 * g, v);
  } else {
    put(dst + 2 * q * MR + 8 * g, _mm256_and_si256(v, _mm256_set1_epi32(int(0xffff0000u))));
    put(dst + (2 * q + 1) * MR + 8 * g, _mm256_slli_epi32(v, 16));
  }
}
constexpr int kGroups = (MR + 7) / 8;
constexpr int64_t kSlack = 16;  // dwords after a packed A block

// One A panel: rows [m, m + rows) (rows <= MR) x pairs [q0, q0 + kcp) -> dst (dp: kcp
// rows of MR dwords; emulation: 2 kcp rows of MR floats). Lanes of rows past `rows`
// are never read by the kernels (they run `rows` rows).
void pack_a_panel(const Prob& p, bool dp, int64_t m, int rows, int64_t q0, int64_t kcp, uint32_t* dst) {
  const int64_t full = full_pairs(p, q0, kcp);
  int64_t q = 0;
  if (!p.a_trans) {  // A (M, K): 8 rows x 8 pairs per transpose
    for (; q + 8 <= full; q += 8) {
      __m256i r[kGroups][8];
      for (int g = 0; g < kGroups; ++g) {
        for (int i = 0; i < 8; ++i)
          r[g][i] = 8 * g + i < rows ? loadu8(p.A + (m + 8 * g + i) * p.lda + 2 * (q0 + q))
                                     : _mm256_setzero_si256();
        transpose8(r[g]);
      }
      for (int i = 0; i < 8; ++i)
        for (int g = 0; g < kGroups; ++g) store_rows(dst, dp, q + i, g, r[g][i]);
    }
  } else {  // A stored (K, M): a pair interleaves two rows of 8 consecutive m
    for (; q < kcp; ++q) {
      const int64_t k = 2 * (q0 + q);
      const uint16_t* e = p.A + k * p.lda + m;
      const bool odd = k + 1 < p.K;
      __m256i v[kGroups];
      int g = 0;
      for (; g < kGroups && m + 8 * g + 8 <= p.M; ++g)
        v[g] = interleave8(loadu4(e + 8 * g), odd ? loadu4(e + p.lda + 8 * g) : _mm_setzero_si128());
      if (g < kGroups) break;  // the last rows of A: scalar below
      for (g = 0; g < kGroups; ++g) store_rows(dst, dp, q, g, v[g]);
    }
  }
  for (; q < kcp; ++q) {
    alignas(32) uint32_t t[8 * kGroups];
    for (int r = 0; r < 8 * kGroups; ++r) t[r] = r < rows ? a_pair(p, m + r, q0 + q) : 0;
    for (int g = 0; g < kGroups; ++g) store_rows(dst, dp, q, g, loadu8(t + 8 * g));
  }
}

// Rows [m0, m0 + mc) x pairs [q0, q0 + kcp) of A into MR-row panels at dst, in order.
void pack_a_block(const Prob& p, bool dp, int64_t m0, int64_t mc, int64_t q0, int64_t kcp,
                  uint32_t* dst) {
  for (int64_t i0 = 0; i0 < mc; i0 += MR, dst += (dp ? 1 : 2) * kcp * MR)
    pack_a_panel(p, dp, m0 + i0, static_cast<int>(std::min<int64_t>(MR, mc - i0)), q0, kcp, dst);
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
// A packed (IN_PLACE = false): pair q of row r is dword a[q * MR + r]. A in place
// (IN_PLACE = true; row-major A whose pairs in the chunk are all inside K): row r
// starts at halfword r * lda of a, pair q is the dword at halfword 2q of the row (the
// same two bf16 values the packed dword holds). Only called when the CPU has
// AVX512_BF16 (bf16_dot() / gemm_bf16_on check it).
template <int ROWS, bool IN_PLACE>
void micro_dp(int64_t kcp, const void* __restrict a, int64_t lda, const uint32_t* __restrict b,
              float* __restrict c, int64_t ldc, int nv, bool load_c) {
  __m512 acc[ROWS][NV];
#pragma GCC unroll 16
  for (int r = 0; r < ROWS; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j)
      acc[r][j] = !load_c ? zero() : nv == NR ? load(c + r * ldc + j * W)
                                              : load_n(c + r * ldc + j * W, lanes(nv, j));
  const char* ab = static_cast<const char*>(a);
  const int64_t row_bytes = IN_PLACE ? 2 * lda : 4, pair_bytes = IN_PLACE ? 4 : 4 * MR;
#pragma GCC unroll 4
  for (int64_t q = 0; q < kcp; ++q) {
    __m512bh bv[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) bv[j] = (__m512bh)_mm512_loadu_si512(b + j * W);
#pragma GCC unroll 16
    for (int r = 0; r < ROWS; ++r) {
      int32_t d;
      std::memcpy(&d, ab + r * row_bytes, sizeof d);
      const __m512bh ar = (__m512bh)_mm512_set1_epi32(d);
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], ar, bv[j]);
    }
    ab += pair_bytes;
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
using DpFn = void (*)(int64_t, const void*, int64_t, const uint32_t*, float*, int64_t, int, bool);
template <bool IN_PLACE, size_t... I>
constexpr auto dp_table(std::index_sequence<I...>) {
  return std::array<DpFn, sizeof...(I)>{&micro_dp<static_cast<int>(I) + 1, IN_PLACE>...};
}
constexpr auto kDp = dp_table<false>(std::make_index_sequence<MR>{});
constexpr auto kDpInPlace = dp_table<true>(std::make_index_sequence<MR>{});
#endif

// A read in place by the instruction kernel (no packing: each row's pairs are already
// adjacent dwords): row-major A and every pair of the chunk inside K.
inline bool a_in_place(const Prob& p, bool dp, int64_t q0, int64_t kcp) {
#if defined(TITAN_ISA_AVX512)
  return dp && !p.a_trans && 2 * (q0 + kcp) <= p.K;
#else
  (void)p, (void)dp, (void)q0, (void)kcp;
  return false;
#endif
}

// One column of MR-row tiles: rows [m0, m0 + mc) of C x the NR columns at n of one B
// micro-panel b (kcp rows of NR dwords), A from the packed block abuf, or (in_place)
// from A itself at pair q0.
inline void tiles(const Prob& p, bool dp, bool in_place, const uint32_t* abuf, int64_t m0, int64_t mc,
                  int64_t q0, int64_t kcp, const uint32_t* b, int64_t n, bool load_c) {
  const int nv = static_cast<int>(std::min<int64_t>(NR, p.N - n));
  const int64_t wpp = dp ? 1 : 2;
  for (int64_t i0 = 0; i0 < mc; i0 += MR) {
    const int rows = static_cast<int>(std::min<int64_t>(MR, mc - i0));
    float* c = p.C + (m0 + i0) * p.ldc + n;
#if defined(TITAN_ISA_AVX512)
    if (in_place) {
      const uint16_t* a = p.A + (m0 + i0) * p.lda + 2 * q0;
      kDpInPlace[rows - 1](kcp, a, p.lda, b, c, p.ldc, nv, load_c);
      continue;
    }
    if (dp) {
      kDp[rows - 1](kcp, abuf + i0 * kcp, 0, b, c, p.ldc, nv, load_c);
      continue;
    }
#else
    (void)in_place, (void)q0;
#endif
    kEmu[rows - 1](kcp, reinterpret_cast<const float*>(abuf + i0 * wpp * kcp), b, c, p.ldc, nv, load_c);
  }
}

inline uint32_t* a_block_buffer(int64_t mc, bool dp) {
  return a_buffer().get(static_cast<size_t>((mc + MR - 1) / MR * MR * (dp ? 1 : 2) * KCP + kSlack));
}

// Prepacked panels (gemm_bf16_panels): rows [m0, m1) x panels [j0, j1) of C, all of K,
// the micro-panels read in place from bp (panel j: KP rows of NR dwords).
void run_task(const Prob& p, bool dp, const uint32_t* bp, int64_t m0, int64_t m1, int64_t j0,
              int64_t j1) {
  const DazFtz fp;
  const int64_t mc = m1 - m0;
  uint32_t* abuf = a_block_buffer(mc, dp);
  for (int64_t q0 = 0; q0 < p.KP; q0 += KCP) {
    const int64_t kcp = std::min(KCP, p.KP - q0);
    const bool in_place = a_in_place(p, dp, q0, kcp);
    if (!in_place) pack_a_block(p, dp, m0, mc, q0, kcp, abuf);
    for (int64_t j = j0; j < j1; ++j)
      tiles(p, dp, in_place, abuf, m0, mc, q0, kcp, bp + j * p.KP * NR + q0 * NR, j * NR,
            p.accumulate || q0 > 0);
  }
}

// Tasks of rblocks row blocks x cblocks column blocks: enough for every thread when
// there are few row blocks.
inline int64_t column_blocks(int64_t T, int64_t rblocks, int64_t panels) {
  return std::clamp<int64_t>((2 * T + rblocks - 1) / rblocks, 1, panels);
}

using gemm_pack::claim_chunks;

// All of C from whole-K panels (prepacked, or all of B packed by run_blocked): tasks of
// MC rows x a range of panels, each over all of K (its C tile stays in L2 across the K
// chunks), claimed at run time. Who runs a task never changes its bits.
void run_panels(const Prob& p, bool dp, const uint32_t* bp, int64_t T) {
  const int64_t panels = (p.N + NR - 1) / NR, rblocks = (p.M + MC - 1) / MC;
  const int64_t cblocks = column_blocks(T, rblocks, panels);
  claim_chunks(T, rblocks * cblocks, [&](int64_t t) {
    const int64_t rb = t / cblocks, cb = t % cblocks;
    run_task(p, dp, bp, rb * MC, std::min(p.M, rb * MC + MC), panels * cb / cblocks,
             panels * (cb + 1) / cblocks);
  });
}

// B in memory (BLIS loop order with one B block shared by the threads): for each block
// of NC columns x KCP pairs, the threads pack the B block together (NT: by micro-panel,
// NN: by pair rows, each B row read once in address order), then claim tasks of MC rows
// x a column range of the block; a task packs its A rows for the block's pairs (in
// L2) and runs every B micro-panel of its range (in L1) against all of them. The K
// chunks store and reload the fp32 partial in C, so the blocking changes no bit.
void run_blocked(const Prob& p, bool dp) {
  const int64_t T = p.M * p.N * p.K < (int64_t{1} << 18) ? 1 : num_threads();
  auto par = [&](int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
    if (T == 1)
      fn(0, n);
    else
      parallel_for(n, fn);
  };
  const int64_t panels = (p.N + NR - 1) / NR;
  if (panels * NR * p.KP * 4 <= kWholeB) {  // all of B packed once, then run_panels
    uint32_t* bp = b_buffer().get(static_cast<size_t>(panels * NR * p.KP));
    if (p.b_trans)
      par(panels, [&](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j) pack_b_nt(p, j * NR, 0, p.KP, bp + j * p.KP * NR);
      });
    else
      par(p.KP, [&](int64_t b, int64_t e) { pack_b_nn_rows(p, 0, p.N, 0, p.KP, b, e, bp); });
    return run_panels(p, dp, bp, T);
  }
  uint32_t* bblk = b_buffer().get(static_cast<size_t>(KCP * std::min<int64_t>(NC, (p.N + NR - 1) / NR * NR)));
  const int64_t rblocks = (p.M + MC - 1) / MC;
  for (int64_t jc = 0; jc < p.N; jc += NC) {
    const int64_t nc = std::min(NC, p.N - jc), jp = (nc + NR - 1) / NR;
    const int64_t cblocks = column_blocks(T, rblocks, jp);
    for (int64_t q0 = 0; q0 < p.KP; q0 += KCP) {
      const int64_t kcp = std::min(KCP, p.KP - q0);
      if (p.b_trans)
        par(jp, [&](int64_t b, int64_t e) {
          for (int64_t j = b; j < e; ++j) pack_b_nt(p, jc + j * NR, q0, kcp, bblk + j * kcp * NR);
        });
      else
        par(kcp, [&](int64_t b, int64_t e) { pack_b_nn_rows(p, jc, nc, q0, kcp, b, e, bblk); });
      const bool load_c = p.accumulate || q0 > 0, in_place = a_in_place(p, dp, q0, kcp);
      claim_chunks(T, rblocks * cblocks, [&](int64_t t) {
        const DazFtz fp;
        const int64_t rb = t / cblocks, cb = t % cblocks;
        const int64_t m0 = rb * MC, mc = std::min(MC, p.M - m0);
        uint32_t* abuf = in_place ? nullptr : a_block_buffer(mc, dp);
        if (!in_place) pack_a_block(p, dp, m0, mc, q0, kcp, abuf);
        for (int64_t j = jp * cb / cblocks; j < jp * (cb + 1) / cblocks; ++j)
          tiles(p, dp, in_place, abuf, m0, mc, q0, kcp, bblk + j * kcp * NR, jc + j * NR, load_c);
      });
    }
  }
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
  run_blocked(p, dp);
}

int64_t gemm_bf16_panel_width() { return NR; }

// W (N, K) bf16, row stride ldw -> the packed-B panels (ceil(N / NR) * ceil(K / 2) * NR dwords).
void gemm_bf16_pack_panels(int64_t N, int64_t K, const uint16_t* W, int64_t ldw, uint32_t* dst) {
  const Prob p{0, N, K, (K + 1) / 2, nullptr, 1, false, W, ldw, true, nullptr, 1, false};
  const int64_t panels = (N + NR - 1) / NR;
  parallel_for(panels, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) pack_b_nt(p, j * NR, 0, p.KP, dst + j * p.KP * NR);
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
  run_panels(p, dp, Bp, num_threads());
}

}  // namespace titan::kernels::cpu::TITAN_ISA_NS
