#include "titan/rl/rubric.h"

#include <cmath>
#include <exception>
#include <set>

#include "titan/core/error.h"

namespace titan::rl {

Rubric::Rubric(std::vector<RewardFn> fns, RubricOptions options) : fns_(std::move(fns)), options_(options) {
  TITAN_CHECK(!fns_.empty(), "Rubric: needs at least one reward function");
  std::set<std::string> names;
  for (size_t i = 0; i < fns_.size(); ++i) {
    const RewardFn& f = fns_[i];
    TITAN_CHECK(!f.name.empty(), "Rubric: reward function {} has an empty name", i);
    TITAN_CHECK(names.insert(f.name).second, "Rubric: duplicate reward function name '{}'", f.name);
    TITAN_CHECK(static_cast<bool>(f.fn), "Rubric: reward function '{}' has no callable", f.name);
    TITAN_CHECK(std::isfinite(f.weight), "Rubric: reward function '{}' has a non-finite weight {}", f.name,
                f.weight);
  }
  TITAN_CHECK(!options_.truncation_reward || std::isfinite(*options_.truncation_reward),
              "Rubric: truncation_reward must be finite, got {}", options_.truncation_reward.value_or(0.0));
  TITAN_CHECK(!options_.error_reward || std::isfinite(*options_.error_reward),
              "Rubric: error_reward must be finite, got {}", options_.error_reward.value_or(0.0));
}

void Rubric::score(Rollout& r) const {
  r.rewards.clear();
  r.total_reward = 0.0;
  if (options_.truncation_reward && is_truncated(r.status)) {
    r.rewards.push_back({"truncated", 1.0, *options_.truncation_reward, ""});
    r.total_reward = *options_.truncation_reward;
    return;
  }
  if (options_.error_reward && r.status == RolloutStatus::error) {
    r.rewards.push_back({"errored", 1.0, *options_.error_reward, ""});
    r.total_reward = *options_.error_reward;
    return;
  }
  for (const RewardFn& f : fns_) {
    RewardComponent c{f.name, f.weight, 0.0, ""};
    try {
      const double v = f.fn(r);
      if (std::isfinite(v)) {
        c.value = v;
      } else {
        c.error = fmt::format("returned {}", v);
      }
    } catch (const std::exception& e) {
      c.error = std::string("threw: ") + e.what();
    } catch (...) {
      c.error = "threw: unknown exception";
    }
    r.total_reward += c.weight * c.value;
    r.rewards.push_back(std::move(c));
  }
}

}  // namespace titan::rl
