// Activations (differentiable, fp32, element-wise; torch names and semantics).
// Each fused op has its composed twin in titan::composed (built from the ops of
// elementwise.h, recorded op by op): the reference in tests and the fallback.
//
// Errors (titan::Error naming op and argument): dtype not f32; swiglu shapes differ.
#pragma once
#include "titan/core/tensor.h"

namespace titan {

Tensor relu(const Tensor& x);  // max(x, 0); gradient 0 at x <= 0 (as torch)
// silu(x) = x · sigmoid(x) (Elfwing et al. 2017; torch.nn.functional.silu).
Tensor silu(const Tensor& x);
// GELU, tanh approximation (Hendrycks & Gimpel 2016; torch gelu(approximate="tanh")):
// 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))).
Tensor gelu(const Tensor& x);
// SwiGLU (Shazeer 2020): silu(gate) · up; gate and up of equal shape.
Tensor swiglu(const Tensor& gate, const Tensor& up);
// gpt-oss's clamped SwiGLU (OpenAI gpt-oss reference; transformers GptOssExperts._apply_gate):
//   g = min(gate, limit), u = clamp(up, -limit, limit),
//   out = (u + 1) · g · sigmoid(alpha · g).
// gate and up of equal shape, f32; limit > 0, alpha > 0 (titan::Error otherwise). The
// gradient of a clamped input is 0 where the clamp is active (strictly beyond limit; the
// boundary passes it, as torch.clamp), in double per element, rounded once.
Tensor swiglu_oai(const Tensor& gate, const Tensor& up, double alpha, double limit);

namespace composed {
Tensor silu(const Tensor& x);
Tensor gelu(const Tensor& x);
Tensor swiglu(const Tensor& gate, const Tensor& up);
}  // namespace composed

}  // namespace titan
