// Rubrics: weighted reward functions of a finished rollout (TitanRL Rubric).
//
//   Rubric rubric({{"correct", 1.0, [](const Rollout& r) { return check(r) ? 1.0 : 0.0; }},
//                  {"format", 0.1, format_reward}});
//   rubric.score(rollout);   // rollout.rewards[i] = {name, weight, value, error}
//                            // rollout.total_reward = sum_i weight_i * value_i
//
// Failure containment: a reward function that throws (any exception) or returns a
// non-finite value gives value 0 for that rollout, with the reason in
// RewardComponent::error ("threw: <what>", "returned nan"); the other functions
// still run. Scoring never throws.
//
// Weights are used as given: total = sum w_i r_i (TitanRL normalises the weights to
// sum 1; pass weights that sum to 1 for the same scale). truncation_reward /
// error_reward, when set, short-circuit the functions for truncated / errored
// rollouts (TitanRL's Rubric.Config), recording one component "truncated" /
// "errored" with that value.
//
// Thread safety: score() is const and may run concurrently on different rollouts;
// reward functions must therefore be safe to call concurrently.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "titan/rl/rollout.h"

namespace titan::rl {

struct RewardFn {
  std::string name;
  double weight = 1.0;
  std::function<double(const Rollout&)> fn;
};

struct RubricOptions {
  std::optional<double> truncation_reward;  // for status truncated_* (skip the functions)
  std::optional<double> error_reward;       // for status error (skip the functions)
};

class Rubric {
 public:
  // Throws titan::Error for: no functions, an empty or duplicate name, a null fn, a
  // non-finite weight, a non-finite truncation/error reward.
  explicit Rubric(std::vector<RewardFn> fns, RubricOptions options = {});

  // Fills r.rewards and r.total_reward (replacing earlier values). Never throws.
  void score(Rollout& r) const;
  void score_group(std::vector<Rollout>& group) const {
    for (Rollout& r : group) score(r);
  }

  const std::vector<RewardFn>& functions() const { return fns_; }
  const RubricOptions& options() const { return options_; }

 private:
  std::vector<RewardFn> fns_;
  RubricOptions options_;
};

}  // namespace titan::rl
