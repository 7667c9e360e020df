// Matrix products (differentiable) on the batch-invariant GEMM kernels of
// titan/kernels/cpu/gemm.h: every output element is one fp32 FMA chain over the
// reduction index in ascending order, whatever the number of rows (DESIGN.md §1.2).
// The second operand (the weight) may be bf16: it is widened exactly to fp32 inside the
// kernel (fp32 accumulation); the first operand may be bf16 too (widened before).
// Outputs and gradients are f32. Gradients: dA = dY·Bᵀ (gemm_f32, "NT"),
// dB = Aᵀ·dY (gemm_f32_tn, summed over rows/tokens in ascending order); for linear,
// dX = dY·W (gemm_f32 "NN"), dW = dYᵀ·X (gemm_f32_tn), db = Σ_rows dY (ascending).
//
// Errors (titan::Error naming op and argument): dtype not f32/bf16, rank not
// supported, inner sizes or batch sizes that differ.
#pragma once
#include "titan/core/tensor.h"

namespace titan {

// a (M, K) · b (K, N) -> (M, N); a (B, M, K) · b (B, K, N) -> (B, M, N);
// a (B, M, K) · b (K, N) -> (B, M, N) (b shared by every batch entry).
Tensor matmul(const Tensor& a, const Tensor& b);

// y (..., out) = x (..., in) · wᵀ + bias, w (out, in) (nn.Linear layout), bias (out)
// optional (pass an undefined Tensor). x may have any rank >= 1.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor());

}  // namespace titan
