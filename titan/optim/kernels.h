// Raw elementwise kernels of the optimizers (contiguous fp32 arrays, single thread;
// callers split [0, n) across threads — every element is independent, so the bits
// never depend on the split). Written once with AVX2+FMA intrinsics (the baseline
// every titan CPU has, see titan/kernels/cpu/dispatch.h) with masked vector tails,
// so an element's arithmetic never depends on its position or on the machine's ISA.
//
// The operation orders replicate PyTorch 1.13's CPU kernels (measured bit for bit
// against /usr/bin/python3 torch on this machine; see tests/optim/adamw_test.cpp):
//   Tensor.mul_(s)            x * float(s)
//   Tensor.add_(y, alpha=s)   fma(y, float(s), x)        (Vectorized fmadd)
//   Tensor.addcmul_(y, z, s)  fma(float(s) * y, z, x)    (contracted by the compiler)
//   Tensor.addcdiv_(y, z, s)  x + (float(s) * y) / z
//   Tensor.lerp_(e, w)        |w| < 0.5 ? fma(w, e - x, x) : fma(-(e - x), 1 - w, e)
#pragma once
#include <cstdint>

namespace titan::optim::kernels {

// Scalars of one AdamW step, already rounded to fp32 the way torch does.
struct AdamWScalars {
  float decay;          // 1 - lr * weight_decay
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float bias_correction2_sqrt;  // sqrt(1 - beta2^step)
  float eps;
  float neg_step_size;  // -lr / (1 - beta1^step)
};

// One AdamW step on n elements, in place (torch 1.13 _single_tensor_adamw order):
//   p  = p * decay
//   m  = fma(g, 1-β1, m * β1)
//   v  = fma((1-β2) * g, g, v * β2)
//   p  = p + (-step_size * m) / (sqrt(v) / bc2_sqrt + eps)
// param, exp_avg, exp_avg_sq: (n) fp32, updated; grad: (n) fp32.
void adamw_update(float* param, float* exp_avg, float* exp_avg_sq, const float* grad, int64_t n,
                  const AdamWScalars& s);

// out = torch.lerp(start, end, w) (out may alias start or end). (n) fp32.
void lerp(float* out, const float* start, const float* end, float w, int64_t n);

// x = x * s. (n) fp32.
void scale(float* x, float s, int64_t n);
// out = x * s (out may alias x). (n) fp32.
void scale_to(float* out, const float* x, float s, int64_t n);
// x = x / d (true division, as torch's X / tensor). (n) fp32.
void divide(float* x, float d, int64_t n);
// y = fma(x, a, y) — torch's y.add_(x, alpha=a). (n) fp32.
void axpy(float* y, float a, const float* x, int64_t n);
// out = (s * x) + y, two roundings (torch's `s * x + y` as two ops). out may alias x or y.
void scale_add(float* out, float s, const float* x, const float* y, int64_t n);

// Σ x[i]² in double, in one fixed order: each square is exact in double; element i
// feeds lane i % 16 of four 4-lane accumulators (vector j → accumulator j % 4, the
// last vector masked with zeros), combined as (a0 + a1) + (a2 + a3) and then lanes
// (l0 + l2) + (l1 + l3). Depends only on n and the values.
double sum_squares(const float* x, int64_t n);

}  // namespace titan::optim::kernels

#include <functional>

#include "titan/core/thread_pool.h"

namespace titan::optim {
// Splits elementwise work on [0, n) across the thread pool (static partition, at
// least kElementwiseGrain elements per thread). Only for work whose every element is
// independent, so the result bits never depend on the thread count.
inline constexpr int64_t kElementwiseGrain = int64_t{1} << 14;
inline void parallel_elementwise(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  parallel_for_grain(n, kElementwiseGrain, fn);
}
}  // namespace titan::optim
