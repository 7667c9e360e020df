// The RL controller (`titan rl`): on-policy GRPO/DAPO post-training with a generator
// and a trainer that run one model definition and agree bitwise.
//
//   load samples (seeded, resumable TaskDataset over the task's train split)
//   -> rollouts: Rollouter::run on an infer::Engine over the GENERATOR's own Decoder
//   -> rewards (task rubric + DAPO overlong penalty) -> group advantages
//      (DAPO dynamic sampling: drop zero-variance groups, draw more)
//   -> packed training batches (one sequence per turn, loss on completion tokens)
//   -> trainer forward: logprobs (and the gap to the generator's: logprob_diff_max)
//   -> policy_loss (old logprobs = the generator's; k3 KL to the frozen initial policy
//      when rl.kl_coef > 0) -> backward, clip, AdamW step
//   -> sync_weights(trainer -> generator) -> next step.
//
// Modes: rl.max_offpolicy_steps = 0 runs the loop above in one thread. >= 1 runs the
// generator in its own thread filling a WorkBuffer (each item = one step's rollouts,
// tagged with the policy version that produced them) while the trainer trains; after
// every optimizer step the trainer copies its weights into a staging Decoder (under a
// mutex) and the generator swaps it in between its rollout batches. A batch for
// trainer step k is only started with weights of version >= k - max_offpolicy_steps,
// and the WorkBuffer drops anything older, so offpolicy_lag_max <= max_offpolicy_steps.
//
// Outputs in job.dump_folder: config.toml, metrics.jsonl (one row per step; val_reward
// rows at step 0, every rl.val_freq steps and at the last step), rollouts.jsonl (the
// first rollout of each group and every failed one), checkpoint/step-N (model,
// optimizer, step, dataset position, policy version; resumed automatically).
// Determinism: same config => bitwise-identical metrics (timings aside) in synchronous
// mode, including across a stop + resume.
#pragma once
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "titan/config/job_config.h"
#include "titan/rl/tasks.h"

namespace titan::rl {

struct RLRunOptions {
  int64_t stop_after_steps = -1;  // >= 0: save a checkpoint and return after this many steps (tests)
  bool print = true;              // console lines
};

struct RLResult {
  int64_t steps_done = 0;
  // NaN: not measured in this run (validation off, or resumed past step 0); -1 is a real reward.
  double val_reward_initial = std::numeric_limits<double>::quiet_NaN();  // at step 0
  double val_reward_final = std::numeric_limits<double>::quiet_NaN();    // the last val_reward measured
  double logprob_diff_max = 0;     // largest over the steps of this run
  int64_t offpolicy_lag_max = 0;
  int64_t rollouts = 0;                              // generated in this run
  std::map<std::string, int64_t> rollout_errors;     // failed rollouts of this run by reason
  bool interrupted = false;
  std::string dump_folder;
};

class RLController {
 public:
  // Builds the task (rl.env + rl.env_config, or `task` when given: tests inject
  // tasks with failing reward functions), tokenizer, trainer/generator/reference
  // models, optimizer and schedule. Throws titan::Error on bad config or files.
  explicit RLController(const config::JobConfig& job, std::optional<TaskSpec> task = std::nullopt);
  ~RLController();
  RLController(const RLController&) = delete;
  RLController& operator=(const RLController&) = delete;

  // Runs (or resumes from the newest checkpoint in the dump folder) to training.steps.
  RLResult run(const RLRunOptions& options = {});

  struct State;

 private:
  std::unique_ptr<State> st_;
};

// `titan rl` entry point after config resolution: runs, prints a summary. Returns the
// process exit code (130 when interrupted by a signal).
int run_rl_job(const config::JobConfig& job);

// The keys of a metrics.jsonl row that are timings or memory (not expected to repeat
// bitwise between runs).
bool is_timing_metric(const std::string& key);

}  // namespace titan::rl
