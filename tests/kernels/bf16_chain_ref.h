// The scalar reference of the bf16 product chain of titan/kernels/cpu/bf16.h, for
// tests: fp32 FMAs in software with DAZ inputs and FTZ after rounding.
#pragma once
#include <cmath>
#include <cstdint>

#include "titan/core/dtype.h"

namespace titan::test::bf16_chain {

inline constexpr float kMin = 0x1p-126f;  // FLT_MIN

inline float daz(float x) { return std::fabs(x) < kMin ? std::copysign(0.0f, x) : x; }

// fma with FTZ after rounding, in software: std::fmaf rounds a tiny result to a
// subnormal; whether it is tiny with an unbounded exponent is decided on the same
// problem scaled by 2^64 (exact: the inputs are normal or zero here).
inline float fma_ftz(float a, float b, float c) {
  const float r = std::fmaf(a, b, c);
  if (r == 0.0f || !(std::fabs(r) < kMin)) return r;
  const float rs = std::fabs(a) < std::fabs(b) ? std::fmaf(a * 0x1p64f, b, c * 0x1p64f)
                                               : std::fmaf(a, b * 0x1p64f, c * 0x1p64f);
  if (std::fabs(rs) < 0x1p-62f) return std::copysign(0.0f, rs);
  return rs * 0x1p-64f;
}

// One step of the chain: fma*(a, b, c) of bf16.h on two bf16 bit patterns.
inline float step(uint16_t a, uint16_t b, float c) {
  return fma_ftz(daz(bf16_to_f32(a)), daz(bf16_to_f32(b)), daz(c));
}

}  // namespace titan::test::bf16_chain
