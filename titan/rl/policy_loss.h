// The RL policy loss: PPO clipped surrogate with GRPO/DAPO aggregation and an optional
// k3 KL penalty to a frozen reference policy. Differentiable w.r.t. the trainer's
// logprobs only; built from the differentiable ops of titan/ops (exp, sub, mul, where,
// sum), so its gradient is the autograd of exactly the forward below.
//
// Per response token t of sequence s (|o_s| tokens), with A_t the sequence's advantage:
//   r_t  = exp(logprobs_t - old_logprobs_t)              importance ratio; old = the
//                                                        generator's logprobs (behaviour policy)
//   l_t  = -min(r_t A_t, clip(r_t, 1 - ε_low, 1 + ε_high) A_t)
//            PPO clipped surrogate (Schulman et al. 2017, eq. 7); ε_high > ε_low is DAPO's
//            clip-higher (Yu et al. 2025, §3.1, eq. 10)
//        + β k3_t,  k3_t = exp(ref_t - logprobs_t) - (ref_t - logprobs_t) - 1
//            (Schulman 2020 "Approximating KL divergence"; GRPO, Shao et al. 2024, eq. 4)
// Aggregation over the sequences of the WHOLE optimizer step:
//   seq_mean_token_mean (GRPO, eq. 3): loss = (1/total_sequences) Σ_s (1/|o_s|) Σ_t l_t
//   token_mean          (DAPO, eq. 12): loss = (1/total_tokens)    Σ_s Σ_t l_t
// A call may hold only part of the step (a microbatch): with the step's normalisers the
// losses of the microbatches add up to the full-batch loss, and each token's gradient
// (w_t · ∂l_t/∂logprobs_t, w_t its aggregation weight) is bitwise the same whatever the
// split, because every op here is element-wise except the final fixed-order sum.
//
// Gradient conventions (those of torch.min / torch.clamp): where the clipped term is
// strictly selected — A_t > 0 and r_t > 1 + ε_high, or A_t < 0 and r_t < 1 - ε_low — the
// surrogate's gradient is 0; elsewhere it is -A_t r_t (ties, including r_t exactly on
// the band edge, take the unclipped gradient, which equals the clipped one there).
// No log-ratio clamp: a ratio that overflows f32 (log-ratio > 88.7) gives inf/NaN.
//
// Errors (titan::Error naming the argument): undefined or non-f32 tensors, tensors not
// of shape (N) with N >= 1, seq_offsets not [0, ..., N] strictly increasing (every
// sequence needs >= 1 token), the active normaliser < the call's sequences/tokens,
// ref_logprobs undefined with kl_coef > 0, ε_low outside [0, 1), ε_high < 0, kl_coef < 0.
#pragma once
#include <cstdint>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::rl {

// GRPO: mean over tokens of each sequence, then over sequences. DAPO: sum over all
// tokens / total tokens of the batch.
enum class LossAggregation { seq_mean_token_mean, token_mean };

struct PolicyLossConfig {
  double epsilon_low = 0.2, epsilon_high = 0.2;
  double kl_coef = 0.0;  // β
  LossAggregation aggregation = LossAggregation::seq_mean_token_mean;
};

struct PolicyLossInputs {
  Tensor logprobs;      // (N) f32: trainer logprobs of the response tokens of S sequences
                        // packed back to back; carries autograd
  Tensor old_logprobs;  // (N) f32: the generator's logprobs of the same tokens (no grad)
  Tensor ref_logprobs;  // (N) f32 reference-policy logprobs, or undefined when kl_coef == 0
  Tensor advantages;    // (N) f32: each token's sequence advantage
  std::vector<int64_t> seq_offsets;  // [S+1], seq_offsets[0] = 0, seq_offsets[S] = N
  // Normalisers of the WHOLE optimizer step (see the header comment):
  int64_t total_sequences = 0;  // used by seq_mean_token_mean (>= S)
  int64_t total_tokens = 0;     // used by token_mean (>= N)
};

// Over the N tokens of this call (forward values, in double).
struct PolicyLossStats {
  double clip_frac = 0;       // fraction of tokens whose clipped term is strictly selected
  double clip_frac_low = 0;   // ... with A < 0 and r < 1 - ε_low
  double clip_frac_high = 0;  // ... with A > 0 and r > 1 + ε_high
  double ratio_mean = 0, ratio_max = 0;
  double kl_mean = 0;  // mean k3 when ref_logprobs is given (even with kl_coef == 0), else 0
  int64_t tokens = 0;
};

struct PolicyLossResult {
  Tensor loss;  // 0-d f32, differentiable w.r.t. in.logprobs
  PolicyLossStats stats;
};

PolicyLossResult policy_loss(const PolicyLossInputs& in, const PolicyLossConfig& cfg);

}  // namespace titan::rl
