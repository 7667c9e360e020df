// The long-context workload's recipes (rl/long_context.h): SFT on key-value retrieval,
// then GRPO from its export. Registered in the table of recipes.cpp.
#include "titan/config/recipes.h"

namespace titan::config {

namespace {

// 8-24 key-value pairs (prompts of ~150-330 tokens): the 2-core budget of the
// recipes; the environment builds 4k-16k-token haystacks with max_pairs 360-1450
// (docs/rl-workloads.md has the engine and trainer at those lengths).
constexpr const char* kLongContextTaskConfig =
    R"({"num_samples": 20000, "num_validation": 256, "min_pairs": 8, "max_pairs": 24, "value_digits": 3})";

}  // namespace

// alphabet_sort_sft's small chat model trained from scratch on retrieval
// demonstrations (<answer>VALUE</answer>, loss on the reply only).
JobConfig long_context_sft() {
  JobConfig c = workload_sft("long_context", kLongContextTaskConfig);
  c.job.description = "long_context SFT: the alphabet_sort_sft model on key-value retrieval, from scratch";
  c.training.seq_len = 1024;
  c.training.steps = 600;
  c.validation.freq = 200;
  return c;
}

// GRPO on long_context from the long_context_sft export: group 8, 64 rollouts per
// step, temperature 1.0, one turn of at most 32 tokens (the reply
// `<answer>907</answer><|im_end|>` is 21 byte_chat tokens). Reward: exact match.
JobConfig long_context_grpo() {
  JobConfig c = workload_grpo("long_context", kLongContextTaskConfig);
  c.job.description = "GRPO on long_context from the long_context_sft checkpoint (group 8, temperature 1.0)";
  c.training.steps = 20;
  c.generator.max_tokens = 32;
  c.generator.kv_cache_bytes = int64_t{64} << 20;
  c.rl.rollouts_per_step = 64;
  c.rl.val_freq = 10;
  c.rl.val_samples = 128;
  c.rl.max_turns = 1;
  c.rl.max_total_tokens = 1024;
  return c;
}

}  // namespace titan::config
