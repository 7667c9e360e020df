// The tool-use workload's recipes (rl/tool_use.h): SFT on tool-using demonstrations,
// then GRPO from its export. Registered in the table of recipes.cpp.
#include "titan/config/recipes.h"

namespace titan::config {

namespace {

// Questions of one and two hops (city, job, country) about 12 people in 6 cities of
// 3 countries, 2 documents per search, all three tools offered. The SFT and the GRPO
// run read the same task config, so they see the same knowledge base, questions and
// validation split. With 200 or 48 people this 2-layer byte model did not learn to
// copy the person's name into its query in 900 SFT steps (greedy reward 0.0,
// docs/benchmarks.md); a small cast lets it learn the names.
constexpr const char* kToolUseTaskConfig =
    R"({"num_people": 12, "num_cities": 6, "num_countries": 3, "num_samples": 20256, "num_validation": 256, "question_types": ["city", "job", "country"], "search_k": 2, "max_turns": 4})";

}  // namespace

// alphabet_sort_sft's small Qwen3-style chat model (byte_chat tokens) trained from
// scratch on tool_use demonstrations: the environment run with the reference plan
// (search calls, then <answer>), one masked document per assistant turn (loss on the
// assistant's tokens only; the system prompt, question and tool responses are
// context). Long turns: a 3-turn episode's last prompt is ~900 bytes.
JobConfig tool_use_sft() {
  JobConfig c = workload_sft("tool_use", kToolUseTaskConfig);
  c.job.description = "tool_use SFT: the alphabet_sort_sft model on tool-using demonstrations, from scratch";
  c.training.seq_len = 1024;
  c.training.steps = 900;
  c.validation.freq = 300;
  return c;
}

// GRPO on tool_use from the tool_use_sft export: group 8, 32 rollouts per step,
// temperature 1.0, on-policy, up to 4 assistant turns of at most 96 tokens each.
// Reward: exact match of the final <answer> (0 for an episode cut at max_tokens or
// out of turns).
JobConfig tool_use_grpo() {
  JobConfig c = workload_grpo("tool_use", kToolUseTaskConfig);
  c.job.description = "GRPO on tool_use from the tool_use_sft checkpoint (group 8, temperature 1.0)";
  c.training.steps = 20;
  c.generator.max_tokens = 96;
  c.generator.kv_cache_bytes = int64_t{128} << 20;
  c.rl.rollouts_per_step = 32;
  // No overlong penalty (workload_grpo): answers and calls are far below max_tokens; a cut call already scores 0.
  c.rl.val_freq = 10;
  c.rl.val_samples = 64;
  c.rl.max_turns = 4;
  c.rl.max_total_tokens = 2048;
  return c;
}

}  // namespace titan::config
