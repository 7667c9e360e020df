// bf16 compute (model.compute_dtype = bf16): the mixed precision of TorchTitan
// (param_dtype bf16, reduce_dtype fp32) with PyTorch autocast's choice of which ops run
// in bf16. While a Bf16ComputeScope is alive on the calling thread:
//  - linear(x, w, bias) rounds x and w to bf16 (titan::f32_to_bf16, RNE: the fp32
//    master weight is cast at each use), multiplies on the bf16 GEMM
//    (kernels::cpu::gemm_bf16: fp32 accumulation, the chain stated in
//    titan/kernels/cpu/bf16.h), adds the bias in fp32 and rounds the product to bf16
//    (autocast's bf16 output). The bf16 x and w are what autograd saves for backward
//    (2 bytes per element). Backward: dY is rounded to bf16; dX = dY · W and
//    dW = dYᵀ · X run on the bf16 GEMM and are rounded to bf16 (the grads of bf16
//    products), then widened into fp32 (master grads, optimizer state and gradient
//    reduction stay fp32); db is the fp32 sum of dY.
//  - attention (models/mixers/attention.cpp) rounds Q, K and V to bf16 and its output
//    to bf16; scores, softmax statistics and the P · V accumulation stay fp32.
//  - the LM head's logits and logprobs (Decoder::logits / logprobs) run on bf16 inputs
//    with fp32 logits, and the training loss's fused head (titan/ops/lm_head_bf16.h).
//  - everything else stays fp32: embeddings, RMSNorm, RoPE, activations, residual adds.
// Tensors hold bf16-rounded values in f32 storage where they leave a bf16 op, so the
// fp32 ops that follow read them exactly (autocast's promotion of bf16 inputs).
// The scope is per thread and nests; the autograd nodes remember the precision they
// were recorded with, so backward needs no scope.
#pragma once
#include "titan/core/tensor.h"

namespace titan {

bool bf16_compute();  // true inside a Bf16ComputeScope on this thread

class Bf16ComputeScope {
 public:
  explicit Bf16ComputeScope(bool enable = true);
  ~Bf16ComputeScope();
  Bf16ComputeScope(const Bf16ComputeScope&) = delete;
  Bf16ComputeScope& operator=(const Bf16ComputeScope&) = delete;

 private:
  bool prev_;
};

// Contiguous bf16 copy of a floating tensor (f32 rounded RNE, bf16 as it is); not
// recorded by autograd.
Tensor to_bf16_storage(const Tensor& t);

// x rounded to bf16 values, in f32 storage (differentiable: the gradient passes
// through unchanged, as autocast's casts do). Used at the inputs of bf16 ops that run
// on fp32 kernels (attention).
Tensor round_bf16(const Tensor& x);

// linear in bf16 compute (the rules above); the arguments and errors of linear
// (titan/ops/matmul.h). linear() calls it inside a Bf16ComputeScope.
Tensor linear_bf16(const Tensor& x, const Tensor& w, const Tensor& bias);

// Inference only: w (out, in) f32 or bf16 -> bf16 panels for decode
// (kernels::cpu::gemm_bf16_pack_panels), a bf16 tensor [ceil(out / pw), 2 ceil(in / 2), pw],
// pw = gemm_bf16_panel_width() (f32 weights are rounded RNE first); not recorded.
Tensor repack_linear_weight_bf16(const Tensor& w);
// linear_bf16(x, W, bias) on W's bf16 panels: the same bits (the same chain, the same
// roundings), each weight streamed once. No backward (throws titan::Error when an input
// needs grad); x.size(-1) must match the panels' K.
Tensor linear_panels_bf16(const Tensor& x, const Tensor& panels, int64_t out_features,
                          const Tensor& bias);

}  // namespace titan
