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

// Inference only: linear with the weight repacked for decode. panels f32
// [ceil(out / w), in, w] contiguous, w = kernels::cpu::gemm_panel_width(), as
// repack_linear_weight returns; out_features = out. Same bits as linear(x, W, bias) on
// the W it was packed from (the same chain per element). Not differentiable: throws
// titan::Error when x, panels or bias requires grad (with grad mode on). bf16 panels
// (repack_linear_weight_bf16) run linear_panels_bf16 (titan/ops/bf16_compute.h).
Tensor linear_panels(const Tensor& x, const Tensor& panels, int64_t out_features,
                     const Tensor& bias = Tensor());
// w (out, in) f32 -> its panel layout [ceil(out / w), in, w] (kernels::cpu::gemm_pack_panels);
// not recorded by autograd.
Tensor repack_linear_weight(const Tensor& w);

}  // namespace titan
