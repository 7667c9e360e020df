// The SIMD layer for ISA kernels (included only from titan/kernels/cpu/isa/*.cpp,
// which are compiled once per ISA).
//
// Two vector types:
//  - simd::vf, THE vector of the kernels: W = 16 fp32 lanes on every ISA. AVX-512
//    holds it in one __m512; AVX2 in two __m256 halves (lanes 0-7, 8-15). Every
//    reduction that combines lanes (hsum, hmax, the lane accumulators of reduce.h)
//    therefore groups the same elements in the same order on both ISAs, and a run
//    under TITAN_ISA=avx2 gives the same bits as on AVX-512.
//  - simd::native::vf, the machine's register (16 lanes on AVX-512, 8 on AVX2), for
//    kernels whose arithmetic is lane-wise only (the GEMMs' FMA chain per output
//    element, the attention score and value FMA chains, casts): there the vector width
//    changes only how many elements one instruction carries, never an element's value.
//    A native vector must never be reduced across its lanes.
//
// Batch-invariance rules (notes/batch-invariance.md): FMAs are explicit (fmadd),
// tails use masked loads/stores (never a scalar loop), horizontal sums use one fixed
// tree (hsum), and there is exactly one exp (vexp) shared by softmax, log_softmax,
// cross-entropy, attention and sampling.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#ifndef TITAN_ISA_NS
#error "simd.h is for titan/kernels/cpu/isa/*.cpp only"
#endif

// For vector helpers: on AVX2 a vf is a 64-byte struct, which an out-of-line call
// passes through memory.
#define TITAN_SIMD_INLINE inline __attribute__((always_inline))

namespace titan::kernels::cpu::TITAN_ISA_NS {
namespace simd {
namespace native {

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
// The tree of hsum with max (the two ISAs agree also on signed zeros and NaNs).
inline float hmax(vf v) {
  __m256 lo = _mm512_castps512_ps256(v);
  __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  __m256 s8 = _mm256_max_ps(lo, hi);
  __m128 s4 = _mm_max_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_max_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_max_ss(s2, _mm_movehdup_ps(s2));
  return _mm_cvtss_f32(s1);
}
inline float first(vf v) { return _mm512_cvtss_f32(v); }  // lane 0
inline vf abs_bits(vf x) { return _mm512_andnot_ps(_mm512_set1_ps(-0.0f), x); }  // clears the sign bit
inline vf copy_sign(vf mag, vf sgn) {  // |mag| with the sign of sgn (mag >= 0)
  return _mm512_or_ps(mag, _mm512_and_ps(_mm512_set1_ps(-0.0f), sgn));
}
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
inline float first(vf v) { return _mm256_cvtss_f32(v); }
inline vf abs_bits(vf x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }
inline vf copy_sign(vf mag, vf sgn) { return _mm256_or_ps(mag, _mm256_and_ps(_mm256_set1_ps(-0.0f), sgn)); }
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
TITAN_SIMD_INLINE vf vexp(vf x) {
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


}  // namespace native

#if defined(TITAN_ISA_AVX512)
using namespace native;  // the register is already 16 lanes
#else
// 16 lanes as two AVX2 halves; every operation is the native one on each half, so
// lane i holds the same bits as lane i of the AVX-512 vector.
constexpr int W = 16;
struct vf {
  native::vf lo, hi;  // lanes 0-7, 8-15
};
TITAN_SIMD_INLINE vf zero() { return {native::zero(), native::zero()}; }
TITAN_SIMD_INLINE vf set1(float x) { return {native::set1(x), native::set1(x)}; }
TITAN_SIMD_INLINE vf load(const float* p) { return {native::load(p), native::load(p + 8)}; }
TITAN_SIMD_INLINE void store(float* p, vf v) { native::store(p, v.lo); native::store(p + 8, v.hi); }
// n in [0, 16]; lanes at or past n are never read or written.
TITAN_SIMD_INLINE vf load_n(const float* p, int n) {
  return {native::load_n(p, std::min(n, 8)), n > 8 ? native::load_n(p + 8, n - 8) : native::zero()};
}
TITAN_SIMD_INLINE vf load_n_fill(const float* p, int n, float fill) {
  return {native::load_n_fill(p, std::min(n, 8), fill),
          n > 8 ? native::load_n_fill(p + 8, n - 8, fill) : native::set1(fill)};
}
TITAN_SIMD_INLINE void store_n(float* p, vf v, int n) {
  native::store_n(p, v.lo, std::min(n, 8));
  if (n > 8) native::store_n(p + 8, v.hi, n - 8);
}
#define TITAN_SIMD_PAIR2(name) \
  TITAN_SIMD_INLINE vf name(vf a, vf b) { return {native::name(a.lo, b.lo), native::name(a.hi, b.hi)}; }
#define TITAN_SIMD_PAIR1(name) \
  TITAN_SIMD_INLINE vf name(vf a) { return {native::name(a.lo), native::name(a.hi)}; }
TITAN_SIMD_PAIR2(add)
TITAN_SIMD_PAIR2(sub)
TITAN_SIMD_PAIR2(mul)
TITAN_SIMD_PAIR2(div)
TITAN_SIMD_PAIR2(max)
TITAN_SIMD_PAIR2(min)
TITAN_SIMD_PAIR1(sqrt)
TITAN_SIMD_PAIR1(round_nearest)
TITAN_SIMD_PAIR1(abs_bits)
TITAN_SIMD_PAIR2(copy_sign)
TITAN_SIMD_PAIR1(vexp)
#undef TITAN_SIMD_PAIR1
#undef TITAN_SIMD_PAIR2
TITAN_SIMD_INLINE vf fmadd(vf a, vf b, vf c) { return {native::fmadd(a.lo, b.lo, c.lo), native::fmadd(a.hi, b.hi, c.hi)}; }
TITAN_SIMD_INLINE vf fnmadd(vf a, vf b, vf c) { return {native::fnmadd(a.lo, b.lo, c.lo), native::fnmadd(a.hi, b.hi, c.hi)}; }
TITAN_SIMD_INLINE vf select_lt(vf a, vf b, vf x, vf y) {
  return {native::select_lt(a.lo, b.lo, x.lo, y.lo), native::select_lt(a.hi, b.hi, x.hi, y.hi)};
}
// The AVX-512 tree: 16 -> 8 adds lane i and lane i + 8, then 8 -> 4 -> 2 -> 1.
TITAN_SIMD_INLINE float hsum(vf v) { return native::hsum(native::add(v.lo, v.hi)); }
TITAN_SIMD_INLINE float hmax(vf v) { return native::hmax(native::max(v.lo, v.hi)); }
TITAN_SIMD_INLINE float first(vf v) { return native::first(v.lo); }
TITAN_SIMD_INLINE vf load_bf16(const uint16_t* p) { return {native::load_bf16(p), native::load_bf16(p + 8)}; }
TITAN_SIMD_INLINE vf load_bf16_n(const uint16_t* p, int n) {
  return {native::load_bf16_n(p, std::min(n, 8)), n > 8 ? native::load_bf16_n(p + 8, n - 8) : native::zero()};
}
#endif

}  // namespace simd
}  // namespace titan::kernels::cpu::TITAN_ISA_NS
