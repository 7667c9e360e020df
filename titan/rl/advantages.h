// Group-relative advantages and DAPO reward shaping (DESIGN.md §4 names).
//
// rewards is a flat list of num_groups * group_size rollout rewards, each group (the
// group_size rollouts of one prompt) contiguous: group g is rewards[g*G, (g+1)*G).
// All statistics are computed in double, in ascending index order.
//
// Errors (titan::Error, one line naming the function and the argument): group_size < 1,
// rewards.size() not a multiple of group_size, a non-finite reward (its index is named),
// eps < 0 or non-finite.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace titan::rl {

struct AdvantageConfig {
  // true: GRPO, A_i = (r_i - mean) / (std + eps); false: Dr. GRPO, A_i = r_i - mean.
  bool std_normalize = true;
  double eps = 1e-6;
};

// Per-rollout advantage, same layout as rewards.
//   std_normalize: A_i = (r_i - mean_g) / (std_g + eps)  (GRPO outcome supervision,
//     Shao et al. 2024 "DeepSeekMath", §4.1.2). std_g is the UNBIASED sample standard
//     deviation sqrt(Σ(r - mean)² / (G - 1)), torch.std's default, as TRL's GRPOTrainer
//     and TitanRL compute it.
//   !std_normalize: A_i = r_i - mean_g  (Dr. GRPO, Liu et al. 2025 "Understanding R1-Zero-
//     Like Training", §3.1).
// group_size 1 gives all zeros (r - mean = 0; no std is formed). A group whose rewards
// are all equal gives exactly 0 for every member (r_i - mean = 0 is tested exactly; no
// division by a zero std, no NaN).
std::vector<double> group_advantages(std::span<const double> rewards, int64_t group_size,
                                     const AdvantageConfig& cfg = {});

// DAPO dynamic sampling (Yu et al. 2025 "DAPO", §3.2, eq. 11's constraint
// 0 < |{correct}| < G): one flag per group, true when all its rewards are bitwise equal
// (such a group has all-zero advantages and carries no gradient; the controller drops it
// and samples more). group_size 1: every group is zero-variance.
std::vector<bool> zero_variance_groups(std::span<const double> rewards, int64_t group_size);

// DAPO soft overlong punishment (Yu et al. 2025, §3.4, eq. 13), added to the reward.
// With L_max = max_tokens, L_cache = buffer_len, |y| = response_len (tokens):
//   0                                         if |y| <= L_max - L_cache
//   ((L_max - L_cache) - |y|) / L_cache * factor  if L_max - L_cache < |y| <= L_max
//   -factor                                   if |y| > L_max
// (the paper's factor is 1). Errors: response_len < 0, max_tokens < 1, buffer_len < 1 or
// > max_tokens, factor < 0 or non-finite.
double overlong_penalty(int64_t response_len, int64_t max_tokens, int64_t buffer_len,
                        double factor = 1.0);

}  // namespace titan::rl
