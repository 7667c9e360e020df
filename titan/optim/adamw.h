// AdamW on one parameter tensor (Loshchilov & Hutter 2019, "Decoupled Weight Decay
// Regularization"), with exactly the operation order of PyTorch 1.13's
// torch.optim.AdamW single-tensor path (foreach=False, amsgrad=False,
// maximize=False):
//   step += 1
//   p ← p · (1 − lr·wd)
//   m ← β1·m + (1−β1)·g          v ← β2·v + (1−β2)·g²
//   p ← p − (lr / (1−β1^step)) · m / (√v / √(1−β2^step) + eps)
// Scalars are computed in double as Python does and rounded to fp32 where torch
// passes them to an fp32 kernel. On this machine the result is bit-identical to
// torch (tests/optim/adamw_test.cpp allows 1 ulp to cover torch builds whose scalar
// tail loops are not FMA-contracted).
#pragma once
#include <cstdint>

#include "titan/optim/kernels.h"

namespace titan::optim {

struct AdamWHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

// The fp32 scalars torch 1.13 uses for step number `step` (1-based, after the
// increment). Throws titan::Error if step < 1.
kernels::AdamWScalars adamw_scalars(const AdamWHyper& h, int64_t step);

// One AdamW step on n contiguous fp32 elements (param, exp_avg, exp_avg_sq updated in
// place; grad read). `step` is the 1-based step number of this update. Parallel over
// elements (bits independent of the thread count).
void adamw_step(float* param, float* exp_avg, float* exp_avg_sq, const float* grad, int64_t n,
                int64_t step, const AdamWHyper& h);

}  // namespace titan::optim
