// Element-wise bf16 rounding of raw buffers over the thread pool (kGrain elements per
// range): the one RNE rule of titan/kernels/cpu/bf16.h, used by bf16_compute.cpp and
// lm_head_bf16.cpp. Every element is rounded on its own, so the bits do not depend on
// the thread count.
#pragma once
#include <cstdint>

namespace titan::ops_detail {

// x[i] = bf16(x[i]) as an f32 value, for i in [0, n).
void round_bf16_in_place(float* x, int64_t n);
// dst[i] = bf16 bits of src[i], for i in [0, n).
void cast_f32_to_bf16_parallel(const float* src, uint16_t* dst, int64_t n);

}  // namespace titan::ops_detail
