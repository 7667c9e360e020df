// Packing routines and the chunk scheduler of the GEMMs (included only by
// titan/kernels/cpu/isa/gemm.cpp and gemm_bf16.cpp, so compiled once per ISA). Packing
// only moves and exactly converts numbers (fp32 copies, bf16 -> fp32 is exact), so it
// never changes a bit of the result; it lays operands
// out so the microkernel reads them contiguously:
//   A panel (MR rows, kc)  -> dst[k * MR + r]      (one broadcast per row and k)
//   B panel (kc, NR cols)  -> dst[k * NR + j]      (NR/W vector loads per k)
// B columns beyond N are packed as zeros; the stores of those C lanes are masked.
// The B packers use 8x8 fp32 transposes in 256-bit registers (available in both the
// AVX2 and the AVX-512 build), so they are written once.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#include "titan/core/thread_pool.h"

#ifndef TITAN_ISA_NS
#error "gemm_pack.h is for titan/kernels/cpu/isa/*.cpp only"
#endif

namespace titan::kernels::cpu::TITAN_ISA_NS::gemm_pack {

// ---- 256-bit helpers (8 fp32 lanes), shared by both ISA builds.
inline __m256i mask8(int n) {  // lanes [0, n) set
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline __m256 load8_n(const float* p, int n) {
  return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mask8(n));
}
inline __m256 bf16x8_to_f32(__m128i h) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline __m256 load8_bf16(const uint16_t* p) {
  return bf16x8_to_f32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 load8_bf16_n(const uint16_t* p, int n) {
  if (n >= 8) return load8_bf16(p);
  alignas(16) uint16_t tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (n > 0) std::memcpy(tmp, p, sizeof(uint16_t) * static_cast<size_t>(n));
  return load8_bf16(tmp);
}

// In-register transpose of an 8x8 fp32 block: r[i] lane j  ->  r[j] lane i.
inline void transpose8(__m256 r[8]) {
  __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// ---- A: MR-row panels of an (mc, kc) block, dst[(i / MR) * kc * MR + k * MR + r].
// Row-major A (M, K): element (m, k) at A[m * lda + k]. Groups of 8 rows x 8 k are
// transposed in registers; a group's 8-lane stores for k may spill past the panel's
// MR rows into k + 1's slots, which the next store overwrites (the buffer has 16
// floats of slack after the last panel).
template <int MR>
void pack_a_rowmajor(float* __restrict dst, const float* __restrict A, int64_t lda, int64_t mc,
                     int64_t kc) {
  constexpr int G = (MR + 7) / 8;  // row groups of 8
  for (int64_t i0 = 0; i0 < mc; i0 += MR) {
    const int rows = static_cast<int>(mc - i0 < MR ? mc - i0 : MR);
    for (int64_t k0 = 0; k0 < kc; k0 += 8) {
      const int kn = static_cast<int>(kc - k0 < 8 ? kc - k0 : 8);
      __m256 r[G][8];
      for (int g = 0; g < G; ++g) {
        for (int i = 0; i < 8; ++i) {
          const int row = g * 8 + i;
          r[g][i] = row < rows ? load8_n(A + (i0 + row) * lda + k0, kn) : _mm256_setzero_ps();
        }
        transpose8(r[g]);
      }
      for (int i = 0; i < kn; ++i)
        for (int g = 0; g < G; ++g) _mm256_storeu_ps(dst + (k0 + i) * MR + g * 8, r[g][i]);
    }
    dst += kc * MR;
  }
}
// Transposed A stored (K, M): element (m, k) at A[k * lda + m]. Row k of the block is
// read once, contiguously, and its MR-float pieces go to the panels (one write stream
// per panel); a tail panel gets its `tail` floats per k.
template <int MR>
void pack_a_trans(float* __restrict dst, const float* __restrict A, int64_t lda, int64_t mc,
                  int64_t kc) {
  const int64_t full = mc / MR * MR, tail = mc - full;
  for (int64_t k = 0; k < kc; ++k) {
    const float* src = A + k * lda;
    float* d = dst + k * MR;
    for (int64_t i0 = 0; i0 < full; i0 += MR, d += kc * MR)
      std::memcpy(d, src + i0, sizeof(float) * MR);
    if (tail > 0) std::memcpy(d, src + full, sizeof(float) * static_cast<size_t>(tail));
  }
}

// ---- B panels (kc, NR): columns [0, nv) of the panel are real, the rest zeros.
template <typename T>
inline __m256 load8_t(const T* p) {
  if constexpr (sizeof(T) == 4)
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  else
    return load8_bf16(reinterpret_cast<const uint16_t*>(p));
}
template <typename T>
inline __m256 load8_t_n(const T* p, int n) {
  if constexpr (sizeof(T) == 4)
    return load8_n(reinterpret_cast<const float*>(p), n);
  else
    return load8_bf16_n(reinterpret_cast<const uint16_t*>(p), n);
}

// 8 rows of B "NT" starting at src (row stride ldb), k in [k0, k0 + kn), the first
// `valid` rows real: transposed into dst[k * NR + 0..7].
template <int NR, typename T>
inline void pack_nt_block8(float* __restrict dst, const T* __restrict src, int64_t ldb, int valid,
                           int64_t k0, int kn) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i) r[i] = i < valid ? load8_t_n(src + i * ldb + k0, kn) : _mm256_setzero_ps();
  transpose8(r);
  for (int i = 0; i < kn; ++i) _mm256_storeu_ps(dst + (k0 + i) * NR, r[i]);
}

// B "NT" (N, K), element (k, n) at B[n * ldb + k]: rows of B become columns of the panel.
// The common case (8 real rows, 8 whole k) is straight-line code kept in registers.
template <int NR, typename T>
void pack_b_nt(float* __restrict dst, const T* __restrict B, int64_t ldb, int nv, int64_t kc) {
  static_assert(NR % 8 == 0);
  for (int g = 0; g < NR / 8; ++g) {
    const T* src = B + g * 8 * ldb;
    float* d = dst + g * 8;
    const int valid = nv - g * 8 < 0 ? 0 : (nv - g * 8 > 8 ? 8 : nv - g * 8);
    if (valid == 0) {
      for (int64_t k = 0; k < kc; ++k) _mm256_storeu_ps(d + k * NR, _mm256_setzero_ps());
      continue;
    }
    int64_t k0 = 0;
    if (valid == 8) {
      const T *s0 = src, *s1 = src + ldb, *s2 = src + 2 * ldb, *s3 = src + 3 * ldb;
      const T *s4 = src + 4 * ldb, *s5 = src + 5 * ldb, *s6 = src + 6 * ldb, *s7 = src + 7 * ldb;
      for (; k0 + 8 <= kc; k0 += 8) {
        __m256 r[8] = {load8_t(s0 + k0), load8_t(s1 + k0), load8_t(s2 + k0), load8_t(s3 + k0),
                       load8_t(s4 + k0), load8_t(s5 + k0), load8_t(s6 + k0), load8_t(s7 + k0)};
        transpose8(r);
        float* o = d + k0 * NR;
        _mm256_storeu_ps(o + 0 * NR, r[0]);
        _mm256_storeu_ps(o + 1 * NR, r[1]);
        _mm256_storeu_ps(o + 2 * NR, r[2]);
        _mm256_storeu_ps(o + 3 * NR, r[3]);
        _mm256_storeu_ps(o + 4 * NR, r[4]);
        _mm256_storeu_ps(o + 5 * NR, r[5]);
        _mm256_storeu_ps(o + 6 * NR, r[6]);
        _mm256_storeu_ps(o + 7 * NR, r[7]);
      }
    }
    for (; k0 < kc; k0 += 8)
      pack_nt_block8<NR>(d, src, ldb, valid, k0, static_cast<int>(kc - k0 < 8 ? kc - k0 : 8));
  }
}

// B "NN" (K, N), element (k, n) at B[k * ldb + n]: rows of B are rows of the panel.
template <int NR, typename T>
void pack_b_nn(float* __restrict dst, const T* __restrict B, int64_t ldb, int nv, int64_t kc) {
  static_assert(NR % 8 == 0);
  for (int64_t k = 0; k < kc; ++k) {
    const T* src = B + k * ldb;
    float* d = dst + k * NR;
    for (int g = 0; g < NR / 8; ++g) {
      const int n = nv - g * 8;
      __m256 v;
      if (n <= 0) {
        v = _mm256_setzero_ps();
      } else if constexpr (sizeof(T) == 4) {
        v = load8_n(reinterpret_cast<const float*>(src) + g * 8, n);
      } else {
        v = load8_bf16_n(reinterpret_cast<const uint16_t*>(src) + g * 8, n);
      }
      _mm256_storeu_ps(d + g * 8, v);
    }
  }
}

// A whole (kc, nc) block of B "NN" into its NR-wide panels (panel j at dst + j * NR * kc,
// the last one zero-padded): row k of B is read once, contiguously, for all panels.
// Rows [k0, k1) only (default: all kc), so threads can share the packing of one block.
template <int NR, typename T>
void pack_b_nn_block(float* __restrict dst, const T* __restrict B, int64_t ldb, int64_t nc,
                     int64_t kc, int64_t k0 = 0, int64_t k1 = -1) {
  for (int64_t k = k0; k < (k1 < 0 ? kc : k1); ++k)
    for (int64_t jr = 0; jr < nc; jr += NR)
      pack_b_nn<NR>(dst + jr * kc + k * NR, B + k * ldb + jr, ldb,
                    static_cast<int>(nc - jr < NR ? nc - jr : NR), 1);
}

// Runs fn(chunk) for chunks [0, chunks) on T threads: thread t takes the chunks of its
// own contiguous share in address order, then whatever is left of the other shares. A
// descheduled thread on a shared machine then delays the call by at most a chunk, not
// by its whole share. Who runs a chunk never changes its arithmetic.
template <typename Fn>
void claim_chunks(int64_t T, int64_t chunks, const Fn& fn) {
  T = std::min(T, chunks);
  if (T <= 1) {
    for (int64_t c = 0; c < chunks; ++c) fn(c);
    return;
  }
  std::vector<std::atomic<int64_t>> next(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) next[t].store(chunks * t / T, std::memory_order_relaxed);
  parallel_for(T, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t)
      for (int64_t i = 0; i < T; ++i) {
        const int64_t u = (t + i) % T, end = chunks * (u + 1) / T;
        for (int64_t c; (c = next[u].fetch_add(1, std::memory_order_relaxed)) < end;) fn(c);
      }
  });
}

}  // namespace titan::kernels::cpu::TITAN_ISA_NS::gemm_pack
