// Losses and THE log-probability function (DESIGN.md §1.2), differentiable, fp32.
// All of them run the vocabulary log-sum-exp algorithm of titan/kernels/cpu/softmax.h
// (kVocabChunk chunks merged online in ascending order, THE vexp), so the trainer's
// losses/logprobs and the generator's logprobs have the same bits for the same rows.
//
// Per row t with scaled logits z = logits[t] / temperature and target y = targets[t]:
//   loss[t] = −log_softmax(z)[y] + z_loss · logsumexp(z)²   (PaLM z-loss; 0 if y == ignore_index)
// Reduction over rows: none (T), sum, or mean = sum / (number of non-ignored rows)
// (NaN when every row is ignored, as torch). Row sums use the fixed order of reduce.h.
//
// Errors (titan::Error naming op and argument): logits/hidden/weight not f32 (weight
// may be bf16: widened to an f32 copy), wrong ranks or sizes, targets not i32/i64 of
// shape (T), a target outside [0, V) that is not ignore_index, z_loss < 0, temperature
// not finite and > 0.
#pragma once
#include <cstdint>

#include "titan/core/tensor.h"

namespace titan {

enum class Reduction { none, mean, sum };

// logits (T, V), targets (T). Gradient to logits.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     double z_loss = 0.0, Reduction reduction = Reduction::mean);

// cross_entropy(linear(hidden, weight), ...) fused and chunked over the vocabulary
// (kernels/cpu/loss.h): the (T, V) logits are never materialised, in forward or
// backward. hidden (T, D), weight (V, D). Gradients to hidden and weight.
// expected_grad > 0 (reduction sum or none, a gradient needed): the backward for an
// upstream gradient of exactly float(expected_grad) per row (the trainer: a summed loss
// scaled by 1 / tokens, so every row gets float(1 / tokens)) is computed during the
// forward, in one pass over the logits (kernels::cpu::cross_entropy_fwd_bwd), instead
// of recomputing the logits in the backward: one of the LM head's four GEMMs saved.
// The backward returns those gradients when every upstream value equals it bitwise,
// and otherwise recomputes as without the hint (counted by
// linear_cross_entropy_recomputes); the bits are the same either way. Ignored for
// Reduction::mean. Errors: expected_grad not 0 and not a finite float > 0.
Tensor linear_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                            int64_t ignore_index = -100, double z_loss = 0.0,
                            Reduction reduction = Reduction::mean, double expected_grad = 0.0);
// Backwards of linear_cross_entropy (this process) that recomputed the logits.
int64_t linear_cross_entropy_recomputes();

// THE logprob function: out (T) = log_softmax(hidden · weightᵀ / temperature)[t, targets[t]],
// fused and chunked like linear_cross_entropy; targets in [0, V). Used by the RL trainer
// (gradients to hidden and weight) and the generator (no grad; logprobs_panels below
// once its LM head is repacked). Same bits as composed::logprobs.
Tensor logprobs(const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                double temperature = 1.0);
// The same for the generator once its LM head is repacked (Decoder::repack_for_decode):
// panels = repack_linear_weight(weight) of a (vocab_size, D) weight. Same bits as
// logprobs(hidden, weight, ..). The layout does not record vocab_size: only a panel
// count that does not match it is caught. No backward: throws titan::Error when an
// input needs grad.
Tensor logprobs_panels(const Tensor& hidden, const Tensor& panels, int64_t vocab_size,
                       const Tensor& targets, double temperature = 1.0);

namespace composed {
// The same losses from log_softmax / logsumexp / gather / linear (materialised logits).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     double z_loss = 0.0, Reduction reduction = Reduction::mean);
Tensor linear_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                            int64_t ignore_index = -100, double z_loss = 0.0,
                            Reduction reduction = Reduction::mean);
Tensor logprobs(const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                double temperature = 1.0);
}  // namespace composed

}  // namespace titan
