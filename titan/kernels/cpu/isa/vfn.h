// Vector sigmoid and tanh built on THE shared vexp (simd.h): the one implementation
// of each, used by the activation kernels (SiLU/SwiGLU/GELU-tanh through vsigmoid,
// tanh_fwd through vtanh) and by anything else that needs them (e.g. logit
// soft-capping). Included only from titan/kernels/cpu/isa/*.cpp.
#pragma once
#include "titan/kernels/cpu/isa/reduce.h"

namespace titan::kernels::cpu::TITAN_ISA_NS {
namespace simd {

// sigmoid(x) = 1 / (1 + exp(-x)); 0 for x < -88.7 (exp overflows to inf), 1 for large x.
TITAN_SIMD_INLINE vf vsigmoid(vf x) {
  const vf one = set1(1.0f);
  return div(one, add(one, vexp(sub(zero(), x))));
}

// tanh(x) = sign(x) · (1 - e) / (1 + e) with e = exp(-2|x|) (no overflow for any x;
// absolute error ~1e-7, relative error larger only for |x| < ~1e-3).
TITAN_SIMD_INLINE vf vtanh(vf x) {
  const vf one = set1(1.0f);
  vf e = vexp(mul(set1(-2.0f), vabs(x)));
  vf t = div(sub(one, e), add(one, e));
  return select_lt(x, zero(), sub(zero(), t), t);
}

}  // namespace simd
}  // namespace titan::kernels::cpu::TITAN_ISA_NS
