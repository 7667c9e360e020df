// Elementwise vector math on contiguous fp32 arrays, using the one shared vexp
// (titan/kernels/cpu/isa/simd.h) so every caller gets the same bits.
#pragma once
#include <cstdint>

namespace titan::kernels::cpu {
// y[i] = exp(x[i]) for i < n. y may alias x.
void exp_f32(float* y, const float* x, int64_t n);
}  // namespace titan::kernels::cpu
