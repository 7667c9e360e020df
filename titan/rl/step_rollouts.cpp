#include "titan/rl/step_rollouts.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "titan/core/error.h"
#include "titan/core/philox.h"
#include "titan/rl/tools/tools.h"

namespace titan::rl {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
}  // namespace

uint64_t rollout_seed(uint64_t seed, int64_t step, int64_t round) {
  const PhiloxCounter c = philox_draw(seed, static_cast<uint64_t>(step), static_cast<uint64_t>(round) + 1);
  return (static_cast<uint64_t>(c[1]) << 32) | c[0];
}

StepRollouts collect_step_rollouts(const models::Decoder& model, const data::Tokenizer& tok, Rollouter& rollouter,
                                   TaskDataset& dataset, const StepRolloutSettings& s, int64_t step,
                                   int64_t policy_version) {
  const int64_t G = s.rollout.group_size;
  TITAN_CHECK(G >= 1, "collect_step_rollouts: rl.group_size must be >= 1, got {}", G);
  TITAN_CHECK(s.groups_per_step >= 1, "collect_step_rollouts: groups per step must be >= 1, got {}",
              s.groups_per_step);
  TITAN_CHECK(s.max_sampling_rounds >= 1, "collect_step_rollouts: rl.max_sampling_rounds must be >= 1, got {}",
              s.max_sampling_rounds);
  StepRollouts out;
  out.policy_version = policy_version;
  const int64_t max_rounds = s.dynamic_sampling ? s.max_sampling_rounds : 1;
  int64_t kept_groups = 0;
  for (int64_t round = 0; round < max_rounds && kept_groups < s.groups_per_step; ++round) {
    const int64_t want = s.groups_per_step - kept_groups;
    std::vector<TaskSample> samples = dataset.take(want);
    out.samples_drawn += want;
    // Generation: a fresh engine per round over the generator's weights, seeded by
    // (seed, step, round); every request carries the seed explicitly.
    auto t0 = Clock::now();
    infer::EngineConfig ec = s.engine;
    ec.seed = rollout_seed(s.seed, step, round);
    RolloutConfig rc = s.rollout;
    rc.sampling.seed = ec.seed;
    std::vector<TokenRollout> got;
    const int64_t tool_ns0 = tool_time_ns();
    {
      infer::Engine engine(model, &tok, ec);
      got = rollouter.run(engine, samples, rc, policy_version);
    }
    out.gen_ms += ms_since(t0);
    out.tools_ms += static_cast<double>(tool_time_ns() - tool_ns0) / 1e6;
    TITAN_CHECK(static_cast<int64_t>(got.size()) == want * G,
                "collect_step_rollouts: the rollouter returned {} rollouts for {} samples x group_size {}",
                got.size(), want, G);
    // Group-contiguous order (the rollouter numbers groups 0..want-1 in sample order).
    std::stable_sort(got.begin(), got.end(),
                     [](const TokenRollout& a, const TokenRollout& b) { return a.group < b.group; });
    // Scoring: rubric rewards (inside the rollouts) + DAPO's soft overlong penalty
    // (Yu et al. 2025, "DAPO", eq. 13), then GRPO group advantages.
    auto t1 = Clock::now();
    std::vector<double> rewards(got.size());
    for (size_t i = 0; i < got.size(); ++i) {
      double r = got[i].rollout.total_reward;
      if (s.overlong_buffer_len > 0) {
        int64_t len = 0;
        for (const TurnTokens& t : got[i].turns) len = std::max<int64_t>(len, static_cast<int64_t>(t.completion_ids.size()));
        r += overlong_penalty(len, s.rollout.sampling.max_tokens, s.overlong_buffer_len, s.overlong_penalty_factor);
      }
      rewards[i] = r;
    }
    const std::vector<double> adv = group_advantages(rewards, G, s.advantage);
    std::vector<bool> flat(static_cast<size_t>(want), false);
    if (s.dynamic_sampling) flat = zero_variance_groups(rewards, G);
    out.score_ms += ms_since(t1);
    const int64_t base = static_cast<int64_t>(out.all.size());
    for (int64_t g = 0; g < want; ++g) {
      if (flat[static_cast<size_t>(g)]) {
        ++out.groups_dropped;
        continue;
      }
      if (kept_groups >= s.groups_per_step) continue;
      ++kept_groups;
      for (int64_t j = 0; j < G; ++j) {
        out.kept.push_back(base + g * G + j);
        out.advantages.push_back(adv[static_cast<size_t>(g * G + j)]);
      }
    }
    for (size_t i = 0; i < got.size(); ++i) {
      for (const TurnTokens& t : got[i].turns) out.gen_tokens += static_cast<int64_t>(t.completion_ids.size());
      out.all.push_back(std::move(got[i]));
      out.rewards.push_back(rewards[i]);
    }
    out.groups_generated += want;
    out.rounds = round + 1;
  }
  return out;
}

}  // namespace titan::rl
