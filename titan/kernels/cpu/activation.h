// Element-wise activation kernels, forward and backward (raw fp32, contiguous arrays
// of n elements). One vector functor per function in isa/activation.cpp, built on the
// shared vexp / vsigmoid / vtanh (isa/vfn.h); the last partial vector is masked, so
// every element is computed by the same arithmetic wherever it sits. Threads split
// the array into disjoint blocks. Outputs may alias inputs of the same shape.
// Throws titan::Error for n < 0 or null pointers (with n > 0).
#pragma once
#include <cstdint>

namespace titan::kernels::cpu {

// SiLU (Swish-1; Hendrycks & Gimpel 2016, Ramachandran et al. 2017): out = x · σ(x).
void silu_fwd(float* out, const float* x, int64_t n);
// dx = dout · σ(x) · (1 + x · (1 − σ(x)))  (overwrites dx).
void silu_bwd(float* dx, const float* dout, const float* x, int64_t n);

// GELU, tanh approximation (Hendrycks & Gimpel 2016; PyTorch approximate='tanh'):
//   out = 0.5 · x · (1 + tanh(u)),  u = √(2/π) · (x + 0.044715 · x³),
// evaluated as x · σ(2u) (the same function, accurate in the negative tail).
void gelu_tanh_fwd(float* out, const float* x, int64_t n);
// dx = dout · (0.5 · (1 + t) + 0.5 · x · (1 − t²) · √(2/π) · (1 + 3 · 0.044715 · x²)),
// t = tanh(u)  (overwrites dx).
void gelu_tanh_bwd(float* dx, const float* dout, const float* x, int64_t n);

// tanh (e.g. logit soft-capping cap · tanh(x / cap)): out = tanh(x) from the shared vexp.
void tanh_fwd(float* out, const float* x, int64_t n);
// dx = dout · (1 − out²), out = tanh_fwd's output (overwrites dx).
void tanh_bwd(float* dx, const float* dout, const float* out, int64_t n);

// SwiGLU (Shazeer 2020, the Llama FFN): out = silu(gate) · up; gate, up, out (T, F) as
// n = T·F elements.
void swiglu_fwd(float* out, const float* gate, const float* up, int64_t n);
// dgate = dout · up · silu'(gate),  dup = dout · silu(gate)  (both overwritten).
void swiglu_bwd(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                int64_t n);

}  // namespace titan::kernels::cpu
