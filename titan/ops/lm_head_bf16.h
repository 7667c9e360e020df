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
// are the only scratch (with a backward, also its (rows, V) bf16 gradient).
//
// The training loss (linear_cross_entropy_bf16; Decoder::loss_sum of a bf16-compute
// model): per row the logits above (the same bits as logits_bf16: the loss scores the
// logits the generator samples from), then in fp32 the loss, lse and z-loss of
// linear_cross_entropy (titan/ops/loss.h) by kernels::cpu::cross_entropy_logits_fwd (the
// vocabulary log-sum-exp contract of titan/kernels/cpu/softmax.h), row by row.
//
// Backward of the loss (linear_cross_entropy_bf16): the fp32 gradient g of the fp32
// logits (cross_entropy_logits_bwd: upstream · (softmax·(1 + 2 z_loss lse) − onehot),
// 0 for ignored rows) is rounded to bf16 (f32_to_bf16, RNE: autocast's rule, the
// gradient of a bf16 product is bf16), then
//   dhidden = bf16(g) · bf16(weight)    K = V, vocabulary entries ascending
//   dweight = bf16(g)ᵀ · bf16(hidden)   K = T, rows ascending (one chain across tiles:
//                                       every tile but the last has an even row count)
// on kernels::cpu::gemm_bf16 (the chain of bf16.h: pairs, odd element first, fp32 FMAs,
// DAZ inputs, FTZ results), each result rounded to bf16 once (autocast's bf16 products,
// widened to the fp32 master gradients): linear_bf16's backward rule
// (titan/ops/bf16_compute.h). A row's dhidden depends on no other row; dweight is the
// fixed-order sum over rows. Thread count and ISA change no bit (gemm_bf16's contract).
//
// Backward of logits_bf16 and logprobs_bf16: the fp32 gradient g of the fp32 logits (for
// logprobs: −dlogprob through cross_entropy_logits_bwd on the recomputed logits, which
// have the forward's bits) flows through the bf16 values the forward used:
//   dhidden = g · bf16(weight),  dweight = gᵀ · bf16(hidden)
// on the fp32 GEMMs (gemm_f32, gemm_f32_tn; bf16 values widened exactly), fp32 results.
// The gradient passes straight through the two casts. (tests/models/decoder_bf16_test's
// oracle, tests/reference/decoder_bf16_ref.py, differentiates its head in this rule.)
//
// Errors (titan::Error naming the op): hidden not f32 (T, D), weight not f32/bf16 (V, D),
// panels not repack_linear_weight_bf16's layout for V rows of D, targets not (T) in
// [0, V) (or == ignore_index for the loss), temperature not finite and > 0, z_loss not
// finite and >= 0, expected_grad not 0 and not a finite float > 0, a panels call on
// inputs that need grad.
#pragma once
#include <cstdint>

#include "titan/core/tensor.h"
#include "titan/ops/loss.h"  // Reduction

namespace titan {

// Rows per tile: 64 MiB of fp32 logits, at most T; when that is less than T, rounded
// down to a multiple of 512 (whole K chunks of the bf16 GEMM) or, below 512, to even,
// and at least 2.
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

// linear_cross_entropy (titan/ops/loss.h: the same arguments, loss formula, reduction
// and expected_grad hint) on the bf16 head above: hidden (T, D), weight (V, D) f32 (or
// bf16), targets (T). Gradients to hidden and weight by the bf16 rule above. With
// expected_grad > 0 (reduction sum or none) the gradients for that upstream value are
// computed in the forward, on the same tile's logits; the backward returns them when
// every upstream value equals float(expected_grad) bitwise, else recomputes the logits
// (counted by linear_cross_entropy_bf16_recomputes); the same bits either way.
Tensor linear_cross_entropy_bf16(const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                                 int64_t ignore_index = -100, double z_loss = 0.0,
                                 Reduction reduction = Reduction::mean, double expected_grad = 0.0);
// Backwards of linear_cross_entropy_bf16 (this process) that recomputed the logits.
int64_t linear_cross_entropy_bf16_recomputes();

}  // namespace titan
