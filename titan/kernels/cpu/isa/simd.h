// The SIMD layer for ISA kernels (included only from titan/kernels/cpu/isa/*.cpp,
// which are compiled once per ISA). One vector type `vf` of W fp32 lanes:
// W = 16 (AVX-512) or 8 (AVX2). Kernels are written once against these helpers.
//
// Batch-invariance rules (notes/batch-invariance.md): FMAs are explicit (fmadd),
// tails use masked loads/stores (never a scalar loop), horizontal sums use one fixed
// tree (hsum), and there is exactly one exp (vexp) shared by softmax, log_softmax,
// cross-entropy, attention and sampling.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#ifndef TITAN_ISA_NS
#error "simd.h is for titan/kernels/cpu/isa/*.cpp only"
#endif

namespace titan::kernels::cpu::TITAN_ISA_NS {
namespace simd {

#if defined(TITAN_ISA_AVX512)
constexpr int W = 16;
using vf = __m512;
using vi = __m512i;
inline vf zero() { return _mm512_setzero_ps(); }
inline vf set1(float x) { return _mm512_set1_ps(x); }
inline vf load(const float* p) { return _mm512_loadu_ps(p); }
inline void store(float* p, vf v) { _mm512_storeu_ps(p, v); }
inline __mmask16 tail_mask(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
// Loads n < W (or == W) lanes, zero elsewhere; `fill` for the other lanes.
inline vf load_n(const float* p, int n) { return _mm512_maskz_loadu_ps(tail_mask(n), p); }
inline vf load_n_fill(const float* p, int n, float fill) {
  return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), tail_mask(n), p);
}
inline void store_n(float* p, vf v, int n) { _mm512_mask_storeu_ps(p, tail_mask(n), v); }
inline vf add(vf a, vf b) { return _mm512_add_ps(a, b); }
inline vf sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
inline vf mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
inline vf div(vf a, vf b) { return _mm512_div_ps(a, b); }
inline vf max(vf a, vf b) { return _mm512_max_ps(a, b); }
inline vf min(vf a, vf b) { return _mm512_min_ps(a, b); }
inline vf fmadd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }   // a*b+c
inline vf fnmadd(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); } // c-a*b
inline vf sqrt(vf a) { return _mm512_sqrt_ps(a); }
inline vf round_nearest(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline vi cvt_to_int(vf a) { return _mm512_cvtps_epi32(a); }
inline vf pow2i(vi n) {  // 2^n for n in [-126, 127]
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n, _mm512_set1_epi32(127)), 23));
}
inline vf select_lt(vf a, vf b, vf x, vf y) {  // a < b ? x : y
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), y, x);
}
// Fixed-tree horizontal sum: 16 -> 8 -> 4 -> 2 -> 1 by halving.
inline float hsum(vf v) {
  __m256 lo = _mm512_castps512_ps256(v);
  __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  __m256 s8 = _mm256_add_ps(lo, hi);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
  return _mm_cvtss_f32(s1);
}
inline float hmax(vf v) { return _mm512_reduce_max_ps(v); }  // max is order-independent
// bf16 -> f32 (exact): 16 bf16 values.
inline vf load_bf16(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
}
inline vf load_bf16_n(const uint16_t* p, int n) {
  __m256i h = _mm256_maskz_loadu_epi16(tail_mask(n), p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
#else  // AVX2
constexpr int W = 8;
using vf = __m256;
using vi = __m256i;
inline vf zero() { return _mm256_setzero_ps(); }
inline vf set1(float x) { return _mm256_set1_ps(x); }
inline vf load(const float* p) { return _mm256_loadu_ps(p); }
inline void store(float* p, vf v) { _mm256_storeu_ps(p, v); }
inline __m256i tail_mask(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline vf load_n(const float* p, int n) { return _mm256_maskload_ps(p, tail_mask(n)); }
inline vf load_n_fill(const float* p, int n, float fill) {
  __m256i m = tail_mask(n);
  return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
}
inline void store_n(float* p, vf v, int n) { _mm256_maskstore_ps(p, tail_mask(n), v); }
inline vf add(vf a, vf b) { return _mm256_add_ps(a, b); }
inline vf sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
inline vf mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
inline vf div(vf a, vf b) { return _mm256_div_ps(a, b); }
inline vf max(vf a, vf b) { return _mm256_max_ps(a, b); }
inline vf min(vf a, vf b) { return _mm256_min_ps(a, b); }
inline vf fmadd(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
inline vf fnmadd(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); }
inline vf sqrt(vf a) { return _mm256_sqrt_ps(a); }
inline vf round_nearest(vf a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline vi cvt_to_int(vf a) { return _mm256_cvtps_epi32(a); }
inline vf pow2i(vi n) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
}
inline vf select_lt(vf a, vf b, vf x, vf y) {
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_LT_OQ));
}
inline float hsum(vf v) {  // 8 -> 4 -> 2 -> 1
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
  return _mm_cvtss_f32(s1);
}
inline float hmax(vf v) {
  __m128 s4 = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  __m128 s2 = _mm_max_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_max_ss(s2, _mm_movehdup_ps(s2));
  return _mm_cvtss_f32(s1);
}
inline vf load_bf16(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
}
inline vf load_bf16_n(const uint16_t* p, int n) {
  alignas(16) uint16_t tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::memcpy(tmp, p, sizeof(uint16_t) * n);
  return load_bf16(tmp);
}
#endif

// exp(x) for fp32 lanes: Cody–Waite range reduction x = n*ln2 + r (ln2 split in
// hi/lo), degree-6 polynomial for e^r on |r| <= ln2/2 (Cephes expf coefficients),
// scaled by 2^n. Max error ~2 ulp on the normal range. x < -87.33 (result below
// FLT_MIN) returns exactly 0, so -inf (masked scores) gives 0; x > 88.72 gives inf.
// NaN in, NaN out. This is THE exp of titan's kernels (DESIGN.md §1.2).
inline vf vexp(vf x) {
  const vf hi = set1(88.72283935546875f), lo = set1(-87.33654022216797f);
  vf xc = min(max(x, lo), hi);
  vf n = round_nearest(mul(xc, set1(1.44269504088896341f)));
  vf r = fnmadd(n, set1(0.693359375f), xc);
  r = fnmadd(n, set1(-2.12194440e-4f), r);
  vf p = set1(1.9875691500e-4f);
  p = fmadd(p, r, set1(1.3981999507e-3f));
  p = fmadd(p, r, set1(8.3334519073e-3f));
  p = fmadd(p, r, set1(4.1665795894e-2f));
  p = fmadd(p, r, set1(1.6666665459e-1f));
  p = fmadd(p, r, set1(5.0000001201e-1f));
  vf r2 = mul(r, r);
  p = fmadd(p, r2, add(r, set1(1.0f)));
  // 2^n with n in [-126, 128]: split n = n1 + n2 to avoid overflow at n = 128.
  vf half = mul(n, set1(0.5f));
  vf n1 = round_nearest(sub(half, set1(0.25f)));  // floor(n/2) for integral n
  vf n2 = sub(n, n1);
  vf res = mul(mul(p, pow2i(cvt_to_int(n1))), pow2i(cvt_to_int(n2)));
  res = select_lt(x, lo, zero(), res);
  // NaN propagation: x != x -> NaN (min/max above drop NaNs).
#if defined(TITAN_ISA_AVX512)
  res = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), res, x);
#else
  res = _mm256_blendv_ps(res, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
#endif
  return res;
}

}  // namespace simd
}  // namespace titan::kernels::cpu::TITAN_ISA_NS
