#include "titan/optim/adamw.h"

#include <cmath>

#include "titan/core/error.h"

namespace titan::optim {

kernels::AdamWScalars adamw_scalars(const AdamWHyper& h, int64_t step) {
  TITAN_CHECK(step >= 1, "adamw_scalars: step must be >= 1, got {}", step);
  // torch/optim/adamw.py (1.13) _single_tensor_adamw, in Python doubles:
  const double s = static_cast<double>(step);
  const double bias_correction1 = 1 - std::pow(h.beta1, s);
  const double bias_correction2 = 1 - std::pow(h.beta2, s);
  const double step_size = h.lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);
  kernels::AdamWScalars k;
  k.decay = static_cast<float>(1 - h.lr * h.weight_decay);
  k.beta1 = static_cast<float>(h.beta1);
  k.one_minus_beta1 = static_cast<float>(1 - h.beta1);
  k.beta2 = static_cast<float>(h.beta2);
  k.one_minus_beta2 = static_cast<float>(1 - h.beta2);
  k.bias_correction2_sqrt = static_cast<float>(bias_correction2_sqrt);
  k.eps = static_cast<float>(h.eps);
  k.neg_step_size = static_cast<float>(-step_size);
  return k;
}

void adamw_step(float* param, float* exp_avg, float* exp_avg_sq, const float* grad, int64_t n,
                int64_t step, const AdamWHyper& h) {
  const kernels::AdamWScalars k = adamw_scalars(h, step);
  parallel_elementwise(n, [&](int64_t b, int64_t e) {
    kernels::adamw_update(param + b, exp_avg + b, exp_avg_sq + b, grad + b, e - b, k);
  });
}

}  // namespace titan::optim
