// RL across ranks: `mpirun -np N titan rl` (synchronous on-policy mode).
//
//   ranks [0, T)        the trainer: the policy split by tensor parallelism over tp =
//                       parallelism.tensor_parallel_degree (1 by default;
//                       distributed::TensorParallel without sequence parallelism) and
//                       sharded by FSDP over dp_shard = T / tp (distributed::FullyShard,
//                       the `titan train` code), AdamW on the shards; rank 0 writes
//                       metrics.jsonl, config.toml and the checkpoints and prints the
//                       console lines;
//   ranks [T, N)        the generator (rl.num_generators = N - T = 1): the engine over
//                       its own full copy of the weights; it draws the samples, writes
//                       rollouts.jsonl and runs validation.
//
// One step:
//   generator: collect_step_rollouts -> broadcast of the step's work over the world
//              (tokens, generator logprobs, rewards, advantages, dataset position,
//              the stop decision; CBOR, floats exact)
//   trainers:  policy_update_backward with a DataParallelShare: the microbatches are
//              cut as on one rank and microbatch j runs on dp rank j mod T; the loss
//              of every microbatch is normalised by the whole step's tokens and
//              sequences, so the update equals the 1-rank update bit for bit
//              (policy_update.h, fsdp.h) -> grad norm, clip, AdamW on the shards
//   weights:   FullyShard::full_parameters (the shards' all-gather over dp_shard,
//              DTensor full_tensor; with tp > 1 then TensorParallel::full_parameters,
//              the all-gather of the tp pieces) -> one broadcast from trainer rank 0 over the
//              group {trainer rank 0, generator ranks} -> sync_weights into the
//              generator's compute copy
//   validation (when due): on the generator, over the weights just received; the
//              row's val_* values are broadcast to the trainers for rank 0's row.
// logprob_diff_max is measured by the trainers on the tokens they train (as on one
// rank) and logged by rank 0. With tp = 1 it is 0.0 (the trainer runs the 1-rank
// kernels on the gathered weights). With tp > 1 it is the true gap, > 0: the rowwise
// layers (wo, w2) sum the ranks' partial products over tp (rank order, reduce_pieces),
// which adds them in another order than the generator's one GEMM over the whole
// width (the generator runs at tp = 1). The logprobs then run over the vocabulary
// pieces' logits gathered over tp (cross_entropy, the log-sum-exp algorithm of the
// fused logprobs: the same bits for the same hidden states), so the gap is the
// forward's alone (about 2e-6 nats on the alphabet_sort demo model).
//
// Checkpoints: trainer rank 0 writes the 1-rank format (full model and optimizer
// tensors, gathered from the FSDP shards and the tp pieces), so a run saved on N ranks resumes on 1 and
// vice versa; every rank reads the newest one on resume.
//
// Stopping: the generator decides (SIGINT/SIGTERM, which mpirun forwards to every
// rank, or RLRunOptions::stop_after_steps) and sends the decision with the step's
// work; every rank then ends after that step (rank 0 saves the checkpoint).
//
// Failures: every rank raises the same titan::Error for a bad layout before any work
// (resolve_rl_ranks); an error during the run ends the job through
// distributed::finish (MPI_Abort), so no rank waits forever on a dead peer.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "titan/config/job_config.h"
#include "titan/distributed/device_mesh.h"
#include "titan/distributed/fsdp.h"
#include "titan/distributed/process_group.h"
#include "titan/distributed/tensor_parallel.h"
#include "titan/rl/controller_state.h"

namespace titan::rl {

// Where the trainer and the generator of an RL job run on world_size ranks.
struct RLRanks {
  int world_size = 1;
  int trainers = 1;    // ranks [0, trainers)
  int generators = 0;  // ranks [trainers, world_size); 0: the generator shares the single rank
  int tp = 1;          // the trainer's tensor_parallel_degree
  int dp_shard = 1;    // the trainer's FSDP degree: trainers / tp
};

// Resolves and checks the layout, the same way on every rank, before any work. On one
// rank: every [parallelism] degree must be 1 (data_parallel_shard_degree 1 or -1). On
// N > 1 ranks: trainers = N - rl.num_generators, a multiple of
// tensor_parallel_degree, and data_parallel_shard_degree -1 or trainers / tp.
// Refused with a one-line titan::Error naming the key: rl.num_generators other than
// 1; pipeline, context or expert parallelism and data_parallel_replicate_degree > 1
// (the RL trainer runs FSDP and TP only); tensor_parallel_degree > 1 on one rank or
// with model.compute_dtype=bf16; under mpirun, rl.max_offpolicy_steps > 0
// (asynchronous mode) and optimizer.name=muon with more than one trainer rank (Muon
// needs whole matrices). Sequence parallelism is refused as an unused field
// (command_fields.h). The model's sizes are checked by check_rl_model.
RLRanks resolve_rl_ranks(const config::JobConfig& job, int world_size);

// With layout.tp > 1: the policy's layers must be ones tensor parallelism splits
// (TensorParallel::check_model; no MoE layer) and tp must divide its attention heads, key/value
// heads, FFN width and vocabulary (the messages of `titan train`). One-line
// titan::Error, the same on every rank.
void check_rl_model(const models::TransformerConfig& cfg, const RLRanks& layout);

// One rank's part of a multi-rank RL job: its groups and, on a trainer rank, the
// trainer's mesh and FSDP wrapper (internal; RLController::State owns it).
struct RankGroups {
  RLRanks layout;
  int rank = 0;  // in the world
  std::shared_ptr<distributed::ProcessGroup> world;
  std::shared_ptr<distributed::ProcessGroup> trainers;  // the trainer ranks (null on a generator rank)
  std::unique_ptr<distributed::ProcessGroup> sync;      // trainer rank 0 + the generator ranks (null elsewhere)
  std::unique_ptr<distributed::DeviceMesh> mesh;        // the trainer's mesh: dp_shard × tp = trainers
  std::unique_ptr<distributed::TensorParallel> tp;      // tp > 1: the policy is this rank's tp slice
  std::unique_ptr<distributed::TpComm> tp_comm;         // tp > 1: the tp group (the policy update's logits)
  std::unique_ptr<distributed::FullyShard> fsdp;        // the (tp-local) policy's parameters over dp_shard
  bool is_generator() const { return rank >= layout.trainers; }
  int generator_root() const { return layout.trainers; }  // world rank of the first generator
  ~RankGroups();
};

// The step's work as one byte message (CBOR) and back: the StepRollouts fields the
// trainer reads (per rollout: id, status, failure reason, reward components, group,
// policy version and every turn's token ids, logprobs, routing, advantage scale;
// rewards, kept, advantages, counters, timings), the dataset position after the step
// and the stop decision. Not carried: the rollouts' text (sample, messages,
// completions), which only the generator's rollouts.jsonl needs. Floats and doubles
// travel exactly. decode throws titan::Error on a malformed message.
std::vector<uint8_t> encode_step_work(const StepWork& w, bool stop);
StepWork decode_step_work(const std::vector<uint8_t>& bytes, bool& stop);

}  // namespace titan::rl
