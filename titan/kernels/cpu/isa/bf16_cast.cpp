// fp32 <-> bf16 vector casts (per ISA): the bit formula of titan::f32_to_bf16
// (titan/core/dtype.h), W lanes at a time; the contract is in titan/kernels/cpu/bf16.h.
#include "titan/core/dtype.h"
#include "titan/kernels/cpu/isa/simd.h"

namespace titan::kernels::cpu::TITAN_ISA_NS {
using namespace simd::native;  // lane-wise casts (simd.h)

namespace {
#if defined(TITAN_ISA_AVX512)
// 16 fp32 -> 16 bf16: RNE on the bits (u + 0x7fff + lsb) >> 16; NaN: (u >> 16) | 0x40.
inline __m256i round16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, r, q));
}
#else
// 8 fp32 -> 8 bf16 (the same formula on AVX2).
inline __m128i round8(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  // |u| > 0x7f800000 as signed compare: both sides are non-negative int32.
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  const __m256i v = _mm256_blendv_epi8(r, q, nan);  // every lane in [0, 0xffff]
  const __m256i packed = _mm256_packus_epi32(v, v);  // per 128-bit lane: v0..3 v0..3 | v4..7 v4..7
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}
#endif
}  // namespace

void cast_f32_to_bf16(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
#if defined(TITAN_ISA_AVX512)
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), round16(_mm512_loadu_ps(x + i)));
#else
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), round8(_mm256_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) y[i] = f32_to_bf16(x[i]);  // the same rule, scalar
}

void round_to_bf16(float* x, int64_t n) {
  int64_t i = 0;
#if defined(TITAN_ISA_AVX512)
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(x + i, _mm512_castsi512_ps(_mm512_slli_epi32(
                                _mm512_cvtepu16_epi32(round16(_mm512_loadu_ps(x + i))), 16)));
#else
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(x + i, _mm256_castsi256_ps(_mm256_slli_epi32(
                                _mm256_cvtepu16_epi32(round8(_mm256_loadu_ps(x + i))), 16)));
#endif
  for (; i < n; ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

void cast_bf16_to_f32(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + W <= n; i += W) store(y + i, load_bf16(x + i));
  for (; i < n; ++i) y[i] = bf16_to_f32(x[i]);
}

}  // namespace titan::kernels::cpu::TITAN_ISA_NS
