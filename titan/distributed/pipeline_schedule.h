// Pipeline parallelism, the plan: which layers form each stage, which rank holds it,
// and the order in which each rank runs the forward and backward of its stages'
// microbatches (TorchTitan's pipeline_parallel.py over torch.distributed.pipelining).
//
// Stages. The decoder (embeddings, layers 0..L-1, final norm + LM head + loss) is cut
// into V = pp × stages_per_rank contiguous stages as TorchTitan's
// generate_llm_fqn_per_model_part does with its default weights: the embedding and
// the head count as one layer each, the L + 2 "effective layers" are dealt out evenly
// (the first (L + 2) mod V stages take one more), stage 0 holds the embedding and
// stage V-1 the norm and head. Stage s lives on pp rank s mod pp (the looped layout of
// the interleaved schedules; with one stage per rank, stage s on rank s).
//
// Schedules (n = microbatches per pipeline run):
//  - GPipe: all n forwards, then all n backwards, each in microbatch order.
//  - 1F1B (Megatron's non-interleaved): rank r runs min(pp - 1 - r, n) warm-up
//    forwards, then alternates one forward and one backward, then the remaining
//    backwards.
//  - Interleaved1F1B (several stages per rank; torch.distributed.pipelining's
//    ScheduleInterleaved1F1B, rounds of pp microbatches): warm-up
//    (v - 1)·pp + 2(pp - 1 - r) forwards, then forward/backward pairs, then backwards;
//    forward k goes to local stage (k / pp) mod v, backward k (counted from the first)
//    to local stage v - 1 - (k / pp) mod v.
// In every schedule each stage runs its forwards, and its backwards, in microbatch
// order 0, 1, ..., n-1, so a stage's parameter gradients accumulate in the order of a
// 1-rank run's gradient accumulation.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "titan/config/job_config.h"

namespace titan::distributed {

enum class PipelineScheduleKind { gpipe, one_f_one_b, interleaved_1f1b };

// "GPipe" | "1F1B" | "Interleaved1F1B" (TorchTitan's names); titan::Error otherwise.
PipelineScheduleKind parse_pipeline_schedule(const std::string& name);
const char* pipeline_schedule_name(PipelineScheduleKind k);

struct PipelineStage {
  int64_t first_layer = 0, end_layer = 0;  // transformer layers [first_layer, end_layer)
  bool embeddings = false;                 // stage 0: tok_embeddings
  bool head = false;                       // stage V-1: norm, LM head, loss
};

struct PipelinePlan {
  PipelineScheduleKind schedule = PipelineScheduleKind::one_f_one_b;
  int pp = 1;                  // pipeline ranks
  int stages_per_rank = 1;     // v
  int64_t microbatch_size = 1; // rows per microbatch
  int64_t n_microbatches = 1;  // per pipeline run: local_batch_size / microbatch_size
  std::vector<PipelineStage> stages;  // V = pp × v, in model order
  int num_stages() const { return static_cast<int>(stages.size()); }
  int rank_of_stage(int s) const { return s % pp; }
  // This rank's stages, in model order.
  std::vector<int> stages_of_rank(int rank) const;
};

// The pipeline plan of `job` with pipeline_parallel_degree = pp over a decoder of
// n_layers layers (tied: the LM head is the embedding matrix). The stage count is
// TorchTitan's: ceil((n_layers + 2) / pipeline_parallel_layers_per_stage) when that is
// set (> 0), else pp (GPipe, 1F1B) or 2 pp (Interleaved1F1B). With pp == 1: one stage
// holding everything. Throws a one-line titan::Error, the same on every rank, for: a
// layers-per-stage < 0; with pp == 1, any pipeline key off its default; a stage count that pp does not divide;
// more stages than layers; GPipe/1F1B with more than one stage per rank,
// Interleaved1F1B with one; a microbatch size that does not divide
// training.local_batch_size; Interleaved1F1B with a microbatch count that pp does not
// divide; tied embeddings.
PipelinePlan plan_pipeline(const config::JobConfig& job, int pp, int64_t n_layers, bool tied);

// The stages of a decoder with n_layers layers cut into num_stages stages (header).
std::vector<PipelineStage> split_stages(int64_t n_layers, int num_stages);

struct PipelineAction {
  enum Kind { forward, backward } kind = forward;
  int stage = 0;
  int64_t microbatch = 0;
};

// What pp rank `rank` runs, in order, for one pipeline run (header).
std::vector<PipelineAction> pipeline_actions(const PipelinePlan& plan, int rank);

}  // namespace titan::distributed
