#include "titan/kernels/cpu/vmath.h"

#include "titan/kernels/cpu/dispatch.h"

TITAN_DECLARE_ISA(void, exp_f32, (float* y, const float* x, int64_t n))

namespace titan::kernels::cpu {
void exp_f32(float* y, const float* x, int64_t n) { TITAN_DISPATCH(exp_f32, y, x, n); }
}  // namespace titan::kernels::cpu
