#include "titan/rl/advantages.h"

#include <cmath>

#include "titan/core/error.h"

namespace titan::rl {
namespace {

// Shared argument checks; returns the number of groups.
int64_t check_rewards(const char* fn, std::span<const double> rewards, int64_t group_size) {
  TITAN_CHECK(group_size >= 1, "{}: argument 'group_size' must be >= 1, got {}", fn, group_size);
  const int64_t n = static_cast<int64_t>(rewards.size());
  TITAN_CHECK(n % group_size == 0,
              "{}: argument 'rewards' has {} values, expected a multiple of group_size {}", fn, n,
              group_size);
  for (int64_t i = 0; i < n; ++i)
    TITAN_CHECK(std::isfinite(rewards[i]),
                "{}: argument 'rewards' holds a non-finite value {} at index {}", fn, rewards[i],
                i);
  return n / group_size;
}

}  // namespace

std::vector<double> group_advantages(std::span<const double> rewards, int64_t group_size,
                                     const AdvantageConfig& cfg) {
  const int64_t groups = check_rewards("group_advantages", rewards, group_size);
  TITAN_CHECK(std::isfinite(cfg.eps) && cfg.eps >= 0,
              "group_advantages: argument 'cfg.eps' must be finite and >= 0, got {}", cfg.eps);
  std::vector<double> adv(rewards.size(), 0.0);
  const int64_t G = group_size;
  for (int64_t g = 0; g < groups; ++g) {
    const double* r = rewards.data() + g * G;
    double* a = adv.data() + g * G;
    double sum = 0;
    for (int64_t i = 0; i < G; ++i) sum += r[i];
    const double mean = sum / static_cast<double>(G);
    bool all_equal = true;
    for (int64_t i = 1; i < G; ++i) all_equal = all_equal && r[i] == r[0];
    if (all_equal) continue;  // zeros: r_i - mean is exactly 0 in exact arithmetic
    for (int64_t i = 0; i < G; ++i) a[i] = r[i] - mean;
    if (!cfg.std_normalize) continue;
    double ss = 0;
    for (int64_t i = 0; i < G; ++i) ss += a[i] * a[i];
    const double std = std::sqrt(ss / static_cast<double>(G - 1));  // unbiased (torch.std)
    for (int64_t i = 0; i < G; ++i) a[i] /= std + cfg.eps;
  }
  return adv;
}

std::vector<bool> zero_variance_groups(std::span<const double> rewards, int64_t group_size) {
  const int64_t groups = check_rewards("zero_variance_groups", rewards, group_size);
  std::vector<bool> out(groups, true);
  for (int64_t g = 0; g < groups; ++g) {
    const double* r = rewards.data() + g * group_size;
    for (int64_t i = 1; i < group_size; ++i)
      if (r[i] != r[0]) out[g] = false;
  }
  return out;
}

double overlong_penalty(int64_t response_len, int64_t max_tokens, int64_t buffer_len,
                        double factor) {
  TITAN_CHECK(response_len >= 0, "overlong_penalty: argument 'response_len' must be >= 0, got {}",
              response_len);
  TITAN_CHECK(max_tokens >= 1, "overlong_penalty: argument 'max_tokens' must be >= 1, got {}",
              max_tokens);
  TITAN_CHECK(buffer_len >= 1 && buffer_len <= max_tokens,
              "overlong_penalty: argument 'buffer_len' must be in [1, max_tokens={}], got {}",
              max_tokens, buffer_len);
  TITAN_CHECK(std::isfinite(factor) && factor >= 0,
              "overlong_penalty: argument 'factor' must be finite and >= 0, got {}", factor);
  const int64_t soft = max_tokens - buffer_len;
  if (response_len <= soft) return 0.0;
  if (response_len <= max_tokens)
    return static_cast<double>(soft - response_len) / static_cast<double>(buffer_len) * factor;
  return -factor;
}

}  // namespace titan::rl
