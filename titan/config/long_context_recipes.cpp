// The long-context workload's recipes (rl/long_context.h): a two-stage SFT on
// needle-in-a-haystack retrieval (a length curriculum), then GRPO from its export on
// longer haystacks. Registered in the table of recipes.cpp.
#include "titan/config/recipes.h"

namespace titan::config {

namespace {

// The needle `key: value` among filler lines (haystack "filler"), 3-digit values. The
// 2-layer dim-128 byte model learns the retrieval only through a length curriculum
// (docs/rl-workloads.md, "Long context"): from scratch it stays at the loss of random
// digits on haystacks of 2 lines or more, while a model first trained on the needle
// alone (stage 1: it copies the value from a near-fixed offset) learns to find it among
// 1-4 lines (stage 2) and then finds it among 8-24 lines it never saw in training.
constexpr const char* kStage1TaskConfig =
    R"({"num_samples": 20000, "num_validation": 256, "min_pairs": 1, "max_pairs": 1, "value_digits": 3, "haystack": "filler"})";
constexpr const char* kStage2TaskConfig =
    R"({"num_samples": 20000, "num_validation": 256, "min_pairs": 1, "max_pairs": 4, "value_digits": 3, "haystack": "filler"})";
// GRPO's haystacks: 8-24 lines (prompts of ~150-330 tokens), the 2-core budget; the
// environment builds 4k-16k-token haystacks with max_pairs 360-1450 (docs/rl-workloads.md
// has the engine and trainer at those lengths).
constexpr const char* kGrpoTaskConfig =
    R"({"num_samples": 20000, "num_validation": 256, "min_pairs": 8, "max_pairs": 24, "value_digits": 3, "haystack": "filler"})";

// The SFT schedule of both stages: peak lr 2e-3 (the schedule of the runs in which the
// copy formed; alphabet_sort_sft's 4e-3 spiked the loss in earlier runs), 100 warmup
// steps, cosine to 2e-4.
JobConfig long_context_stage(const char* task_config, int64_t steps) {
  JobConfig c = workload_sft("long_context", task_config);
  c.training.seq_len = 1024;
  c.training.steps = steps;
  c.optimizer.lr = 2e-3;
  c.lr_scheduler.warmup_steps = 100;
  c.lr_scheduler.min_lr = 2e-4;
  c.validation.freq = 250;
  return c;
}

}  // namespace

// Stage 1: alphabet_sort_sft's small chat model trained from scratch on the needle
// line alone (<answer>VALUE</answer>, loss on the reply only).
JobConfig long_context_warmup_sft() {
  JobConfig c = long_context_stage(kStage1TaskConfig, 750);
  c.job.description = "long_context SFT stage 1: the alphabet_sort_sft model on the needle line alone, from scratch";
  return c;
}

// Stage 2: from the stage-1 export, the needle among 1-4 filler lines.
JobConfig long_context_sft() {
  JobConfig c = long_context_stage(kStage2TaskConfig, 1000);
  c.job.description = "long_context SFT stage 2: needle retrieval among 1-4 filler lines, from long_context_warmup_sft";
  c.checkpoint.initial_load_path = "outputs/long_context_warmup_sft/hf";
  return c;
}

// GRPO on 8-24-line haystacks from the long_context_sft export: group 8, 64 rollouts
// per step, temperature 1.0, one turn of at most 32 tokens (the reply
// `<answer>907</answer><|im_end|>` is 21 byte_chat tokens). Reward: exact match.
JobConfig long_context_grpo() {
  JobConfig c = workload_grpo("long_context", kGrpoTaskConfig);
  c.job.description = "GRPO on long_context from the long_context_sft checkpoint (group 8, temperature 1.0)";
  c.training.steps = 40;
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
