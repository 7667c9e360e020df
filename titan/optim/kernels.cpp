// AVX2+FMA implementations of titan/optim/kernels.h. The whole file is compiled for
// the AVX2+FMA baseline through a target pragma (titan requires AVX2+FMA at start-up:
// titan/kernels/cpu/dispatch.cpp); the results are elementwise, so they do not depend
// on the vector width anyway. Tails are masked vectors of the same arithmetic.
#include "titan/optim/kernels.h"

#include <immintrin.h>

#include <cstring>

#pragma GCC push_options
#pragma GCC target("avx2,fma")

namespace titan::optim::kernels {
namespace {

constexpr int W = 8;

inline __m256i tail_mask(int64_t c) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(c)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
// Applies body(i, mask_count) over [0, n): full vectors, then one masked vector.
// body loads with ld(p) and stores with st(p, v) that honour the count.
struct Lanes {
  int64_t c;  // lanes in use (W for full vectors)
  __m256i m;
  __m256 ld(const float* p) const { return c == W ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m); }
  void st(float* p, __m256 v) const {
    if (c == W) _mm256_storeu_ps(p, v); else _mm256_maskstore_ps(p, m, v);
  }
};
template <class Body>
inline void for_lanes(int64_t n, Body body) {
  const Lanes full{W, _mm256_set1_epi32(-1)};
  int64_t i = 0;
  for (; i + W <= n; i += W) body(i, full);
  if (i < n) body(i, Lanes{n - i, tail_mask(n - i)});
}

}  // namespace

void adamw_update(float* param, float* exp_avg, float* exp_avg_sq, const float* grad, int64_t n,
                  const AdamWScalars& s) {
  const __m256 decay = _mm256_set1_ps(s.decay), b1 = _mm256_set1_ps(s.beta1),
               omb1 = _mm256_set1_ps(s.one_minus_beta1), b2 = _mm256_set1_ps(s.beta2),
               omb2 = _mm256_set1_ps(s.one_minus_beta2),
               bc2 = _mm256_set1_ps(s.bias_correction2_sqrt), eps = _mm256_set1_ps(s.eps),
               nss = _mm256_set1_ps(s.neg_step_size);
  for_lanes(n, [&](int64_t i, const Lanes& L) {
    __m256 p = L.ld(param + i), m = L.ld(exp_avg + i), v = L.ld(exp_avg_sq + i),
           g = L.ld(grad + i);
    p = _mm256_mul_ps(p, decay);                                      // param.mul_(1 - lr*wd)
    m = _mm256_fmadd_ps(g, omb1, _mm256_mul_ps(m, b1));               // exp_avg.mul_(β1).add_(g, 1-β1)
    v = _mm256_fmadd_ps(_mm256_mul_ps(omb2, g), g, _mm256_mul_ps(v, b2));  // .mul_(β2).addcmul_(g, g, 1-β2)
    __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), bc2), eps);
    p = _mm256_add_ps(p, _mm256_div_ps(_mm256_mul_ps(nss, m), denom));  // addcdiv_(m, denom, -step)
    L.st(param + i, p);
    L.st(exp_avg + i, m);
    L.st(exp_avg_sq + i, v);
  });
}

void lerp(float* out, const float* start, const float* end, float w, int64_t n) {
  const bool small = (w < 0.f ? -w : w) < 0.5f;
  const __m256 vw = _mm256_set1_ps(w), omw = _mm256_set1_ps(1.f - w);
  for_lanes(n, [&](int64_t i, const Lanes& L) {
    __m256 s = L.ld(start + i), e = L.ld(end + i);
    __m256 d = _mm256_sub_ps(e, s);
    L.st(out + i, small ? _mm256_fmadd_ps(vw, d, s) : _mm256_fnmadd_ps(d, omw, e));
  });
}

void scale(float* x, float s, int64_t n) { scale_to(x, x, s, n); }

void scale_to(float* out, const float* x, float s, int64_t n) {
  const __m256 vs = _mm256_set1_ps(s);
  for_lanes(n, [&](int64_t i, const Lanes& L) { L.st(out + i, _mm256_mul_ps(L.ld(x + i), vs)); });
}

void divide(float* x, float d, int64_t n) {
  const __m256 vd = _mm256_set1_ps(d);
  for_lanes(n, [&](int64_t i, const Lanes& L) { L.st(x + i, _mm256_div_ps(L.ld(x + i), vd)); });
}

void axpy(float* y, float a, const float* x, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  for_lanes(n, [&](int64_t i, const Lanes& L) {
    L.st(y + i, _mm256_fmadd_ps(L.ld(x + i), va, L.ld(y + i)));
  });
}

void scale_add(float* out, float s, const float* x, const float* y, int64_t n) {
  const __m256 vs = _mm256_set1_ps(s);
  for_lanes(n, [&](int64_t i, const Lanes& L) {
    L.st(out + i, _mm256_add_ps(_mm256_mul_ps(vs, L.ld(x + i)), L.ld(y + i)));
  });
}

double sum_squares(const float* x, int64_t n) {
  __m256d a[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                  _mm256_setzero_pd()};
  auto block = [&](const float* p) {  // 16 floats: 4-float group j -> accumulator j
    for (int j = 0; j < 4; ++j) {
      __m256d d = _mm256_cvtps_pd(_mm_loadu_ps(p + 4 * j));
      a[j] = _mm256_add_pd(a[j], _mm256_mul_pd(d, d));  // the square is exact in double
    }
  };
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) block(x + i);
  if (i < n) {  // zero-padded last block: adding +0.0 leaves every partial unchanged
    alignas(32) float tail[16] = {};
    std::memcpy(tail, x + i, static_cast<size_t>(n - i) * sizeof(float));
    block(tail);
  }
  __m256d s = _mm256_add_pd(_mm256_add_pd(a[0], a[1]), _mm256_add_pd(a[2], a[3]));
  alignas(32) double l[4];
  _mm256_store_pd(l, s);
  return (l[0] + l[2]) + (l[1] + l[3]);
}

}  // namespace titan::optim::kernels

#pragma GCC pop_options
