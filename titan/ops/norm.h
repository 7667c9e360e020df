// Normalisation over the last dim (differentiable, fp32), on the row kernels of
// titan/kernels/cpu/norm.h (one lane scheme per row; dw/db summed over fixed 64-row
// chunks in chunk order, so gradients do not depend on the thread count).
// Composed twins in titan::composed.
//
// Errors (titan::Error naming op and argument): dtype not f32, x 0-d, weight/bias
// shape not (D,), eps negative or not finite.
#pragma once
#include "titan/core/tensor.h"

namespace titan {

// RMSNorm (Zhang & Sennrich 2019; HF LlamaRMSNorm): y = w ⊙ x / sqrt(mean(x²) + eps).
// x (..., D); w (D) or undefined (no weight).
Tensor rms_norm(const Tensor& x, const Tensor& w, double eps);

// LayerNorm (Ba et al. 2016; torch layer_norm, biased variance):
// y = (x − mean) / sqrt(var + eps) ⊙ w + b. x (..., D); w, b (D) or undefined.
Tensor layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps);

namespace composed {
Tensor rms_norm(const Tensor& x, const Tensor& w, double eps);
Tensor layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps);
}  // namespace composed

}  // namespace titan
