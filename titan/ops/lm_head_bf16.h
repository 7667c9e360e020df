// The LM head of a bf16-compute model (Decoder::compute_bf16(); model.compute_dtype = bf16,
// `titan generate --dtype bf16`): bf16 inputs, fp32 accumulation, fp32 logits, fp32
// logprobs. The trainer and the generator call these functions on the same hidden rows, so
// their logits and logprobs have the same bits (RL's logprob_diff_max == 0.0).
//
// The chain, per row t and vocabulary entry v:
//   logits[t][v] = the bf16 GEMM chain of titan/kernels/cpu/bf16.h over K = D on
//                  a = f32_to_bf16(hidden[t]) and b = f32_to_bf16(weight[v]) (pairs, odd
//                  element first, fp32 FMAs with DAZ inputs and FTZ results), NOT rounded
//                  to bf16 afterwards (autocast would round the product; the LM head keeps
//                  fp32 logits as the loss and logprobs need them);
//   logprobs[t]  = kernels::cpu::logprobs_from_logits(logits[t], targets[t], 1 / temperature)
//                  (THE logprob function, DESIGN.md §1.2).
// It runs on kernels::cpu::gemm_bf16_panels over the weight's bf16 panels
// (repack_linear_weight_bf16; packed once per call when given the fp32 weight, or kept by
// the generator after Decoder::repack_for_decode): the same bits as gemm_bf16 with
// b_trans, every row independent of the others (batch invariance, prefill == decode).
// Rows are taken lm_head_bf16_tile_rows(T, V) at a time; a tile's (rows, V) fp32 logits
// are the only scratch.
//
// Backward (logits_bf16, logprobs_bf16): the fp32 gradient g of the fp32 logits (for
// logprobs: −dlogprob through cross_entropy_logits_bwd on the recomputed logits, which
// have the forward's bits) flows through the bf16 values the forward used:
//   dhidden = g · bf16(weight),  dweight = gᵀ · bf16(hidden)
// on the fp32 GEMMs (gemm_f32, gemm_f32_tn; bf16 values widened exactly), fp32 results.
// The gradient passes straight through the two casts (autocast's rule).
//
// Errors (titan::Error naming the op): hidden not f32 (T, D), weight not f32/bf16 (V, D),
// panels not repack_linear_weight_bf16's layout for V rows of D, targets not (T) in
// [0, V), temperature not finite and > 0, a panels call on inputs that need grad.
#pragma once
#include <cstdint>

#include "titan/core/tensor.h"

namespace titan {

// Rows per tile: 64 MiB of fp32 logits, at least 1, at most T.
int64_t lm_head_bf16_tile_rows(int64_t T, int64_t V);

// logits (T, V) of hidden (T, D) and weight (V, D) f32 (or bf16); differentiable.
Tensor logits_bf16(const Tensor& hidden, const Tensor& weight);
// The same on panels = repack_linear_weight_bf16(weight) of a (vocab_size, D) weight; no grad.
Tensor logits_panels_bf16(const Tensor& hidden, const Tensor& panels, int64_t vocab_size);

// logprobs (T) of targets (T); differentiable to hidden and weight.
Tensor logprobs_bf16(const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                     double temperature = 1.0);
// The same on the panels (the generator once repacked); no grad.
Tensor logprobs_panels_bf16(const Tensor& hidden, const Tensor& panels, int64_t vocab_size,
                            const Tensor& targets, double temperature = 1.0);

}  // namespace titan
