// RoPE application (per ISA). See titan/kernels/cpu/rope.h.
#include <cstring>

#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/isa/reduce.h"
#include "titan/kernels/cpu/rope.h"

namespace titan::kernels::cpu::TITAN_ISA_NS {
using namespace simd;

namespace {

// One token: Hx heads of Dh at x / out, cache rows c, s (R/2).
void rope_token(float* out, const float* x, const float* cs, const float* sn, int64_t Hx,
                int64_t Dh, int64_t R, RopeStyle style, bool inverse) {
  const int64_t h = R / 2;
  for (int64_t hd = 0; hd < Hx; ++hd) {
    const float* xh = x + hd * Dh;
    float* oh = out + hd * Dh;
    if (style == RopeStyle::rotate_half) {
      for_vectors(h, [&](int64_t i, int c) {
        const vf x1 = load_c(xh + i, c, 0.0f), x2 = load_c(xh + h + i, c, 0.0f);
        const vf cv = load_c(cs + i, c, 0.0f), sv = load_c(sn + i, c, 0.0f);
        vf o1, o2;
        if (!inverse) {
          o1 = sub(mul(x1, cv), mul(x2, sv));
          o2 = add(mul(x2, cv), mul(x1, sv));
        } else {
          o1 = add(mul(x1, cv), mul(x2, sv));
          o2 = sub(mul(x2, cv), mul(x1, sv));
        }
        store_c(oh + i, o1, c);
        store_c(oh + h + i, o2, c);
      });
    } else {
      for (int64_t i = 0; i < h; ++i) {
        const float a = xh[2 * i], b = xh[2 * i + 1], c = cs[i], s = sn[i];
        if (!inverse) {
          oh[2 * i] = a * c - b * s;
          oh[2 * i + 1] = b * c + a * s;
        } else {
          oh[2 * i] = a * c + b * s;
          oh[2 * i + 1] = b * c - a * s;
        }
      }
    }
    if (oh != xh && R < Dh) std::memcpy(oh + R, xh + R, sizeof(float) * (Dh - R));
  }
}

}  // namespace

void rope_apply_qk(float* q_out, float* k_out, const float* q, const float* k,
                   const int64_t* positions, const float* cos, const float* sin, int64_t T,
                   int64_t H, int64_t Hkv, int64_t Dh, int64_t R, RopeStyle style, bool inverse) {
  const int64_t h = R / 2;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, (H + Hkv) * Dh));
  parallel_for_grain(T, grain, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* cs = cos + positions[t] * h;
      const float* sn = sin + positions[t] * h;
      if (H > 0) rope_token(q_out + t * H * Dh, q + t * H * Dh, cs, sn, H, Dh, R, style, inverse);
      if (Hkv > 0)
        rope_token(k_out + t * Hkv * Dh, k + t * Hkv * Dh, cs, sn, Hkv, Dh, R, style, inverse);
    }
  });
}

}  // namespace titan::kernels::cpu::TITAN_ISA_NS
