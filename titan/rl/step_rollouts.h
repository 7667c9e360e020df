// One RL step's rollouts: samples -> Rollouter (generator engine over the
// generator's own Decoder) -> rewards (+ DAPO overlong penalty) -> group advantages,
// with DAPO dynamic sampling (drop groups whose rewards are all equal, draw more
// samples until the step is full or the round cap is reached).
//
//   StepRolloutSettings s = ...;            // from the job config (controller.cpp)
//   StepRollouts b = collect_step_rollouts(gen_model, tok, rollouter, dataset, s, step, version);
//   // b.kept: indices into b.all of the rollouts to train on, group-contiguous;
//   // b.advantages[i]: advantage of b.all[b.kept[i]].
//
// Determinism: the engine of (step, round) is seeded with philox(seed, step, round)
// and every request gets that seed explicitly, so the rollouts of a step depend only
// on (weights, dataset position, seed, step) — not on earlier steps' engines, the
// thread count or a resume.
#pragma once
#include <cstdint>
#include <vector>

#include "titan/data/tokenizer.h"
#include "titan/infer/engine.h"
#include "titan/models/common/decoder.h"
#include "titan/rl/advantages.h"
#include "titan/rl/rollouter.h"
#include "titan/rl/task.h"

namespace titan::rl {

struct StepRolloutSettings {
  int64_t groups_per_step = 8;  // rl.rollouts_per_step / rl.group_size
  RolloutConfig rollout;        // group_size, sampling (temperature, max_tokens, ...), episode limits
  infer::EngineConfig engine;   // KV cache, block size, batching
  uint64_t seed = 0;            // generator.seed
  AdvantageConfig advantage;
  bool dynamic_sampling = false;
  int64_t max_sampling_rounds = 4;  // rounds of generation per step when dynamic_sampling (>= 1)
  int64_t overlong_buffer_len = 0;  // 0 = no overlong penalty
  double overlong_penalty_factor = 1.0;
};

struct StepRollouts {
  std::vector<TokenRollout> all;   // every rollout generated for the step, in generation order
  std::vector<double> rewards;     // [all] rubric total + overlong penalty
  std::vector<int64_t> kept;       // indices into all of the trained rollouts (whole groups)
  std::vector<double> advantages;  // [kept]
  int64_t groups_generated = 0, groups_dropped = 0, rounds = 0;
  int64_t gen_tokens = 0;          // completion tokens generated (all turns, all rollouts)
  double gen_ms = 0, score_ms = 0;
  double tools_ms = 0;             // wall time in tool calls (tools/tools.h) during generation; part of gen_ms
  int64_t policy_version = 0;      // of the weights that generated them
  int64_t samples_drawn = 0;       // dataset samples consumed
};

// The seed of the engine that generates round `round` of step `step`.
uint64_t rollout_seed(uint64_t seed, int64_t step, int64_t round);

// Generates, scores and selects one step's rollouts (see the header comment). Reads
// groups_per_step (more with dynamic sampling) samples from `dataset`. Failures of
// single rollouts (environment, reward function, truncation) are inside the rollouts
// (reward 0, reason recorded); throws titan::Error only for bad settings.
StepRollouts collect_step_rollouts(const models::Decoder& model, const data::Tokenizer& tok, Rollouter& rollouter,
                                   TaskDataset& dataset, const StepRolloutSettings& s, int64_t step,
                                   int64_t policy_version);

}  // namespace titan::rl
