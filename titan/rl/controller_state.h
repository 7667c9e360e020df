// Internal: the state shared by the RL controller's synchronous loop
// (controller.cpp) and its asynchronous generator/trainer pair
// (controller_async.cpp). Not part of the public API.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "titan/checkpoint/train_checkpoint.h"
#include "titan/config/job_config.h"
#include "titan/data/tokenizer.h"
#include "titan/models/common/decoder.h"
#include "titan/optim/lr_scheduler.h"
#include "titan/optim/optimizer.h"
#include "titan/rl/controller.h"
#include "titan/rl/policy_update.h"
#include "titan/rl/rollouter.h"
#include "titan/rl/step_rollouts.h"
#include "titan/rl/task.h"
#include "titan/train/metrics.h"

namespace titan::rl {

using Clock = std::chrono::steady_clock;
inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// One step's generated work as it travels from the generator to the trainer.
struct StepWork {
  int64_t step = 0;
  StepRollouts rollouts;
  DatasetState dataset_after;  // dataset position after this step's samples (checkpointed)
};

struct RankGroups;  // distributed_controller.h
struct RLRanks;

struct RLController::State {
  config::JobConfig job;
  std::string dump;
  std::unique_ptr<data::Tokenizer> tok;
  std::unique_ptr<Rollouter> rollouter;
  std::unique_ptr<models::Decoder> policy;   // the trainer's (fp32 master weights)
  std::unique_ptr<models::Decoder> gen;      // the generator's own copy
  std::unique_ptr<models::Decoder> staging;  // async: the next generator weights
  std::unique_ptr<models::Decoder> ref;      // frozen initial policy (rl.kl_coef > 0)
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<optim::LRScheduler> sched;
  std::unique_ptr<TaskDataset> dataset;
  std::unique_ptr<CheckpointManager> ckpt;
  std::string ckpt_folder;
  StepRolloutSettings gen_settings;
  PolicyUpdateSettings update_settings;
  int64_t start_step = 0;
  int64_t policy_version = 0;
  std::string init_desc;

  // Trains on one step's rollouts (optimizer step included), logs metrics and
  // rollouts, runs validation and checkpoints as due. Returns the metrics row.
  // `sync` copies the new weights to the generator side; it is timed as sync_ms.
  nlohmann::json train_and_log(StepWork& work, int64_t step, const std::function<void()>& sync, RLResult& res,
                               train::MetricsLogger& metrics, std::FILE* rollouts_log, bool stop_now);
  // Greedy validation reward (mean total reward over rl.val_samples episodes). With
  // row: also "val_<name>" for each reward component of the rubric, its mean value
  // over all validation episodes (0 where an episode has no such component, e.g. a
  // truncated one): self-play's win and draw rates against its scripted opponent.
  double validate(nlohmann::json* row = nullptr);
  void save_checkpoint(int64_t step, const DatasetState& ds);
  bool try_resume();
  void run_sync(const RLRunOptions& o, RLResult& res, train::MetricsLogger& metrics, std::FILE* rollouts_log);
  void run_async(const RLRunOptions& o, RLResult& res, train::MetricsLogger& metrics, std::FILE* rollouts_log);
  bool print = true;
  Clock::time_point last_step_end;  // step_ms = wall time since the previous step ended

  // Counts the step's failed rollouts by reason (into res->rollout_errors when given,
  // a console line when printing) and throws titan::Error, after logging the step's
  // rollouts, when more than rl.max_error_fraction of them failed.
  std::map<std::string, int64_t> account_rollout_errors(const StepRollouts& b, int64_t done, RLResult* res,
                                                         std::FILE* rollouts_log);
  // Copies a checkpoint's model tensors into the full (unsharded) policy.
  void load_policy(const LoadedCheckpoint& c);

  // ---- several ranks (distributed_controller.cpp); ranks is null on one rank.
  std::unique_ptr<RankGroups> ranks;
  // Splits the world into trainer and generator ranks; on a trainer rank, shards the
  // policy with FSDP (and builds the optimizer over the shards); drops what the rank
  // does not use (the generator copy on trainers; optimizer and reference on generators).
  void setup_ranks(const RLRanks& layout);
  bool writes_metrics() const;      // rank 0 (or the single rank)
  bool writes_rollouts() const;     // the generator rank (or the single rank)
  // Greedy validation (validate()) where the generator runs; on trainer ranks of a
  // multi-rank job, receives the generator's row values. Collective there.
  double validation(nlohmann::json* row);
  // Trainer ranks: the policy's parameters gathered from the FSDP shards and tp pieces
  // to the full model's tensors (collective over the trainer ranks).
  NamedTensorList full_policy_parameters();
  void send_weights();     // trainer ranks: gathered shards -> generator
  void receive_weights();  // generator rank: -> policy -> sync_weights -> gen
  void save_checkpoint_ranks(int64_t step, const DatasetState& ds);
  void load_checkpoint_ranks(const LoadedCheckpoint& c);
  void run_trainer(const RLRunOptions& o, RLResult& res, train::MetricsLogger& metrics);
  void run_generator(const RLRunOptions& o, RLResult& res, std::FILE* rollouts_log);
};

// Appends the step's selected rollouts (the first of each group, every failed one)
// to rollouts.jsonl (f null: nothing, on a rank that does not write it). Returns how
// many were written.
int64_t log_rollouts(std::FILE* f, const StepRollouts& b, int64_t step, int64_t group_size);

// The failed rollouts of a step by reason: status error (its failure_reason) and
// reward functions that raised ("reward <name>: <error>"), with digits replaced by N
// so that reasons differing only in a turn, count or sample number group together
// ("turn N: the prompt of N tokens ..."). Truncations are not failures.
std::map<std::string, int64_t> rollout_error_counts(const StepRollouts& b);

// Keeps only the lines of a JSONL file whose "step" is <= max_step (resume after a
// stop that logged past the checkpoint). Missing file: nothing to do.
void truncate_jsonl_after(const std::string& path, int64_t max_step);

// True when a signal asked the run to stop (SIGINT/SIGTERM).
bool stop_requested();

}  // namespace titan::rl
