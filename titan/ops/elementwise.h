// Element-wise ops (differentiable, fp32). Torch names and semantics, except that
// there is NO implicit broadcasting: a binary op takes two tensors of equal shape, or
// one of them holds a single element (0-d or 1-element tensor) and acts as a scalar.
// Use expand() to broadcast explicitly.
//
// Every op computes each element with the same per-element arithmetic whatever the
// tensor size or thread count (batch invariance, DESIGN.md §1.2): exp, sigmoid and
// tanh use THE shared vector exp (titan::kernels::cpu::exp_f32), so their bits equal
// those of the fused kernels' vsigmoid/vtanh.
//
// Errors (titan::Error, message names the op and the argument): undefined tensors,
// dtype other than f32, shape mismatch between non-scalar operands, cond not bool/u8.
#pragma once
#include "titan/core/tensor.h"

namespace titan {

// ---- binary (shape rule above). Gradients flow to both operands (a scalar operand
// receives the sum of its gradient).
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
// x + s and x * s for a double s (rounded to f32 once).
Tensor add(const Tensor& x, double s);
Tensor scale(const Tensor& x, double s);
inline Tensor mul(const Tensor& x, double s) { return scale(x, s); }

// out = cond ? a : b; cond bool or u8 with the output's shape; a, b f32 with that
// shape or single-element scalars. Gradients to a and b (none to cond).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// ---- unary
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);      // vexp: ~2 ulp, 0 below -87.34, inf above 88.72
Tensor log(const Tensor& x);      // libm logf
Tensor tanh(const Tensor& x);     // sign(x)(1 - e)/(1 + e), e = exp(-2|x|) (= kernels' vtanh)
Tensor sigmoid(const Tensor& x);  // 1 / (1 + exp(-x)) (= kernels' vsigmoid)
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);    // 1 / sqrt(x)
Tensor pow(const Tensor& x, double p);  // x^p (powf; p = 2 is x*x, p = 0.5 is sqrt)
Tensor square(const Tensor& x);
Tensor abs(const Tensor& x);      // gradient sign(x), 0 at x = 0 (as torch)

// ---- in-place, NOT recorded by autograd (for optimizer and bookkeeping code).
// self must be a contiguous f32 tensor that does not require grad while grad mode
// is on (throws otherwise); other follows the binary shape rule against self.
const Tensor& add_(const Tensor& self, const Tensor& other, double alpha = 1.0);  // self += alpha*other
const Tensor& mul_(const Tensor& self, const Tensor& other);                      // self *= other
const Tensor& scale_(const Tensor& self, double s);                                // self *= s

// ---- operator sugar (same ops)
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& a) { return neg(a); }
inline Tensor operator+(const Tensor& a, double s) { return add(a, s); }
inline Tensor operator-(const Tensor& a, double s) { return add(a, -s); }
inline Tensor operator*(const Tensor& a, double s) { return scale(a, s); }
inline Tensor operator*(double s, const Tensor& a) { return scale(a, s); }

}  // namespace titan
