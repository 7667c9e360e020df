// The compaction workload's recipes (rl/compaction.h): SFT on running-list episodes
// with summaries, then GRPO from its export. Registered in the table of recipes.cpp.
#include "titan/config/recipes.h"

namespace titan::config {

namespace {

// 4-6 list turns of 2 + 1-2 names (up to 12 names) from alphabet_sort's 16 x 16 name
// pool; the environment asks for a summary when a turn's context reaches 256 tokens.
// Without compaction the longest episodes' contexts pass 768 tokens (the GRPO run's
// rl.max_total_tokens); with it every context stays below it (compaction_test).
constexpr const char* kCompactionTaskConfig =
    R"({"num_samples": 20000, "num_validation": 256, "min_turns": 4, "max_turns": 6, "min_names": 2, "max_names": 2, "min_new_names": 1, "max_new_names": 2, "name_pool": 16, "context_budget": 256})";

}  // namespace

// alphabet_sort_sft's small chat model trained from scratch on compaction
// demonstrations: every turn's sorted list, and the list so far as the summary when
// the environment asks for one; one masked document per turn in its own context.
JobConfig compaction_sft() {
  JobConfig c = workload_sft("compaction", kCompactionTaskConfig);
  c.job.description = "compaction SFT: the alphabet_sort_sft model on running-list episodes with summaries, from scratch";
  c.training.seq_len = 1024;
  c.training.steps = 600;
  c.validation.freq = 200;
  return c;
}

// GRPO on compaction from the compaction_sft export: group 8, 16 episodes per step,
// temperature 1.0, each context at most 768 tokens (rl.max_total_tokens), replies of
// at most 192 tokens. Reward: the mean list similarity over the episode's turns.
JobConfig compaction_grpo() {
  JobConfig c = workload_grpo("compaction", kCompactionTaskConfig);
  c.job.description = "GRPO on compaction from the compaction_sft checkpoint (group 8, temperature 1.0)";
  c.training.steps = 8;  // 212 s on the shared 2-core machine (docs/rl-workloads.md)
  c.generator.max_tokens = 192;
  c.generator.kv_cache_bytes = int64_t{128} << 20;
  c.rl.rollouts_per_step = 16;
  c.rl.val_freq = 4;
  c.rl.val_samples = 32;
  c.rl.max_turns = 11;
  c.rl.max_total_tokens = 768;
  return c;
}

}  // namespace titan::config
