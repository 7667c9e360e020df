// The self-play workload's recipes (rl/self_play.h): SFT on Nim games played with
// random legal moves, then GRPO self-play from its export. Registered in the table
// of recipes.cpp.
#include "titan/config/recipes.h"

namespace titan::config {

namespace {

// Piles of 5..8 stones, moves of 1..3, max_moves 8 (a pile of at most 8 stones is
// always emptied first, so every game has a winner), 256 validation games against the scripted random opponent (half with
// the policy moving first). A short system prompt: the context is rebuilt every move
// and the prompt is ~90% of the trained tokens, so halving the rules' text (113 -> 57
// bytes) trains ~26% fewer tokens per move. The SFT and the GRPO run read the same
// task config.
constexpr const char* kSelfPlayTaskConfig =
    R"({"num_samples": 20000, "num_validation": 256, "min_stones": 5, "max_stones": 8, "max_take": 3, "max_moves": 8, "demo_policy": "random", "system_prompt": "Nim: take 1-3 stones, the last stone wins. <move>N</move>"})";

}  // namespace

// alphabet_sort_sft's small chat model trained from scratch on self-play games whose
// moves are uniformly random legal takes: it learns the format (<move>N</move>) and
// the legal moves, not Nim's strategy (take n mod 4), which the GRPO run has to find.
// One masked document per move (the context restarts every move: ~150 tokens). 300
// steps learned the format but not which takes are legal at small piles (greedy
// "take 1" everywhere, 9% of the sampled moves illegal); 1200 steps condition the
// moves on the pile (1.8% illegal); 3000 steps gave GRPO the start from which it went
// furthest in its 60 steps (greedy val_win 0.49 -> 0.84; from 1200: 0.27 -> 0.67; the
// optimal policy's: 0.94).
JobConfig self_play_sft() {
  JobConfig c = workload_sft("self_play", kSelfPlayTaskConfig);
  c.job.description = "self_play SFT: the alphabet_sort_sft model on Nim games of random legal moves, from scratch";
  c.training.seq_len = 512;
  c.training.steps = 3000;
  c.lr_scheduler.warmup_steps = 20;
  c.validation.freq = 1000;
  return c;
}

// GRPO self-play from the self_play_sft export: each group is 8 games of the policy
// against itself from the same pile (64 games per step), temperature 1.0; the
// rollout's reward is player 1's outcome (+1 / -1 / 0) and player 2's moves train with
// the opposite advantage. Validation: greedy games against the scripted random
// opponent (val_reward = win - loss rate, val_win, val_draw).
JobConfig self_play_grpo() {
  JobConfig c = workload_grpo("self_play", kSelfPlayTaskConfig);
  c.job.description = "GRPO self-play on Nim from the self_play_sft checkpoint (group 8, temperature 1.0)";
  c.training.steps = 60;
  // 5e-4 and 2e-4 also raise val_win; 3e-4 got the highest within 60 steps (docs/rl-workloads.md).
  c.optimizer.lr = 3e-4;
  c.lr_scheduler.warmup_steps = 4;
  c.generator.max_tokens = 16;
  c.generator.kv_cache_bytes = int64_t{64} << 20;
  c.rl.rollouts_per_step = 64;
  // No overlong penalty (workload_grpo): a move is 15 tokens of 16; a cut reply forfeits.
  c.rl.val_freq = 10;
  c.rl.val_samples = 256;
  c.rl.max_turns = 8;
  c.rl.max_total_tokens = 512;
  return c;
}

}  // namespace titan::config
