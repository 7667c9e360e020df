// RL recipes (`titan rl --recipe NAME`). Registered in the table of recipes.cpp.
#include "titan/config/recipes.h"

namespace titan::config {

// GRPO on alphabet_sort from the SFT checkpoint (TitanRL's reference experiment at
// CPU size): the same samples as alphabet_sort_sft (its task config: seed, sample
// count, names per list, validation split), group_size 8, temperature 1.0, on-policy
// (max_offpolicy_steps 0), no KL penalty. The initial policy is the SFT run's HF
// export, so `titan train --recipe alphabet_sort_sft` must run first (make demo).
//
// Reward: the task's text similarity with power 1 (alphabet_sort_sft's task config):
// a small SFT model of a few CPU minutes rarely reproduces a name exactly, so the
// exact-line similarity would give whole groups of 0 (no advantage, no gradient).
JobConfig alphabet_sort_grpo() {
  JobConfig c = alphabet_sort_sft();  // model/tokenizer fields; the weights come from rl.init_from
  c.job.description = "GRPO on alphabet_sort from the alphabet_sort_sft checkpoint (group 8, temperature 1.0)";
  // training.dataset / task fields stay the SFT's: `titan rl` reads its samples from rl.env.
  c.training.steps = 100;
  c.training.seed = 4242;  // order of the task's train split
  c.training.max_norm = 1.0;
  c.validation.enabled = false;  // RL validation is rl.val_freq / rl.val_samples
  // AdamW moves every weight by ~lr per step whatever the gradient's size; on this small,
  // low-entropy (~0.1 nat/token) SFT policy 5e-4 and 1e-3 lowered the reward (noisy
  // 64-rollout gradients), 1e-4 and 3e-5 raised it (docs/benchmarks-history.md, RL).
  c.optimizer.lr = 3e-5;
  c.optimizer.weight_decay = 0.0;
  c.lr_scheduler.warmup_steps = 0;
  c.lr_scheduler.decay_type = DecayType::constant;
  c.lr_scheduler.min_lr = 0.0;
  c.checkpoint.enable = true;
  c.checkpoint.interval = 10;
  c.checkpoint.keep_latest_k = 2;
  c.checkpoint.export_hf = false;
  c.metrics.log_freq = 1;
  c.generator.kv_cache_bytes = int64_t{64} << 20;
  c.generator.temperature = 1.0;
  c.generator.max_tokens = 160;
  c.generator.seed = 2024;
  c.rl.algorithm = RLAlgorithm::grpo;
  c.rl.env = "alphabet_sort";
  c.rl.env_config = alphabet_sort_sft().training.task_config;  // the SFT's task: same samples, split and reward
  c.rl.init_from = "outputs/alphabet_sort_sft/hf";
  c.rl.group_size = 8;
  c.rl.rollouts_per_step = 64;
  c.rl.max_offpolicy_steps = 0;
  c.rl.epsilon_low = 0.2;
  c.rl.epsilon_high = 0.2;
  c.rl.kl_coef = 0.0;
  c.rl.std_normalize = true;
  c.rl.overlong_buffer_len = 40;  // DAPO soft overlong penalty over the last 40 of 160 tokens (answers are ~90)
  c.rl.overlong_penalty_factor = 1.0;
  c.rl.val_freq = 20;
  c.rl.val_samples = 128;
  c.rl.max_turns = 1;
  c.rl.max_total_tokens = 1024;
  c.rl.microbatch_tokens = 4096;
  return c;
}

// The MoE pair: alphabet_sort_sft's task and schedule on a 2-layer Qwen3-MoE chat model
// (8 experts of width 128, 2 per token, byte_chat tokens; recipes/alphabet_sort_moe.json),
// then GRPO from its export. The RL run reports routing_mismatch_frac (0 when the
// generator routes every trained token as the trainer does) next to logprob_diff_max.
JobConfig alphabet_sort_moe_sft() {
  JobConfig c = alphabet_sort_sft();
  c.job.description = "alphabet_sort SFT: Qwen3-MoE 2-layer dim-128 chat model (8 experts, top-2), byte_chat tokens";
  c.model.name = "qwen3_moe";
  c.model.flavor = "alphabet_sort_moe_sft";
  c.model.hf_config = "recipes/alphabet_sort_moe.json";
  return c;
}

JobConfig alphabet_sort_moe_grpo() {
  JobConfig c = alphabet_sort_grpo();
  const JobConfig sft = alphabet_sort_moe_sft();
  c.job.description = "GRPO on alphabet_sort from the alphabet_sort_moe_sft checkpoint (Qwen3-MoE, group 8)";
  c.model = sft.model;
  c.rl.init_from = "outputs/alphabet_sort_moe_sft/hf";
  return c;
}

JobConfig workload_sft(const std::string& task, const std::string& task_config) {
  JobConfig c = alphabet_sort_sft();
  c.model.flavor = task + "_sft";
  c.training.task = task;
  c.training.task_config = task_config;
  c.training.local_batch_size = 2;
  c.metrics.log_freq = 50;
  return c;
}

JobConfig workload_grpo(const std::string& task, const std::string& task_config) {
  JobConfig c = alphabet_sort_grpo();
  c.model.flavor = task + "_sft";
  c.training.task = task;
  c.training.task_config = task_config;
  c.optimizer.lr = 1e-4;
  c.rl.env = task;
  c.rl.env_config = task_config;
  c.rl.init_from = "outputs/" + task + "_sft/hf";
  c.rl.group_size = 8;
  c.rl.overlong_buffer_len = 0;
  c.rl.microbatch_tokens = 4096;
  return c;
}

}  // namespace titan::config
