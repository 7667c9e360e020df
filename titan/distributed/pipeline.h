// Pipeline parallelism, the runtime: a decoder cut into the stages of a PipelinePlan
// (pipeline_schedule.h), this pp rank's stages run as its schedule orders, activations
// sent forward and their gradients backward with point-to-point messages on the mesh's
// pp group (TorchTitan's PipelineStage + schedule step).
//
// Every rank builds and initialises the whole model from the seed (so a stage's
// weights are the 1-rank run's), then frees the parameters of the stages it does not
// hold. Every pp rank reads the same microbatches (the tokens, positions and targets
// are small); only the first stage embeds tokens, only the last computes the loss:
// Σ token CE with the backward seeded by float(1 / valid), valid = the step's target
// count over the whole job (TorchTitan's global token mean), as the 1-rank trainer.
//
// Messages: an activation (T, D) f32 from stage s-1 to stage s carries tag s, the
// gradient from stage s+1 back to stage s tag V + s; one (sender, tag) pair carries
// one stage's microbatches in microbatch order, which MPI keeps. Sends do not block
// (ProcessGroup::isend_bytes), receives do, so every schedule that would run with
// unbounded buffers runs here (pipeline_schedule_test simulates each).
//
// Bits. A stage's input is a leaf; its gradient is the engine's sum of the same
// contributions, in the same node order, that a 1-rank backward forms at that
// activation, so each microbatch's parameter gradient has the 1-rank bits; stages run
// their backwards in microbatch order, so AccumulateGrad adds them in the 1-rank
// order. The gradient norm sums the per-parameter ‖g‖² of every stage in the model's
// parameter order (optim::grad_norm's order), so clipping scales by the 1-rank factor.
//
// Tensor parallelism inside the stages (tp given): the model is the rank's tp slice
// (TensorParallel::build) and its pp group joins the ranks of one tp coordinate, so tp
// rank r of stage s sends to tp rank r of stage s + 1. Without SP the activation (T, D)
// and its gradient are replicated over tp (every tp rank sends its copy); with SP the
// residual stream is sequence-sharded at a stage boundary as everywhere else, so each tp
// rank sends its T/tp rows (tp times less traffic, no gather at the boundary). The last
// stage computes the vocabulary-parallel loss (TensorParallel::loss); with FSDP the
// partial gradients of the replicated norms are summed over tp before each reduction.
// TP is not bitwise equal to tp = 1 (tensor_parallel.h), so neither is PP × TP.
// Under context parallelism (set_context_parallel) the forward keeps the 1-rank bits
// (the loss of every microbatch), the gradients are CP's (context_parallel.h).
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "titan/data/packing.h"
#include "titan/distributed/device_mesh.h"
#include "titan/distributed/pipeline_schedule.h"
#include "titan/models/common/decoder.h"
#include "titan/optim/param_groups.h"

namespace titan::distributed {

class ContextParallel;
class ExpertParallel;
class FullyShard;
class TensorParallel;

struct PipelineStats {
  int64_t bytes_sent = 0;  // activations and gradients sent by this rank
  double recv_wait_ms = 0; // wall time blocked in receives (the bubble as this rank sees it)
};

class Pipeline {
 public:
  // Collective over nothing; frees the parameters of the stages this rank (coordinate
  // pp of `mesh`) does not hold. Throws titan::Error when plan.pp is not the mesh's
  // pp degree or the plan's layers are not the model's. With tp, `model` is tp's slice
  // (TensorParallel::build) and outlives nothing of tp's.
  Pipeline(models::Decoder& model, const DeviceMesh& mesh, PipelinePlan plan, TensorParallel* tp = nullptr);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  const PipelinePlan& plan() const { return plan_; }
  // Context parallelism inside every stage (context_parallel.h): train() and
  // loss_sum() run each microbatch as this cp rank's share of its tokens (activations
  // between stages are (T / cp, D)), the head sums the per-token losses of all cp ranks
  // in token order. forward() stays the whole batch's on every cp rank (as sampling
  // without a pipeline). Null: none.
  void set_context_parallel(ContextParallel* cp) { cp_ = cp; }
  // Expert parallelism of this rank's MoE layers (expert_parallel.h, built for this
  // rank's stages only): train() reduces the experts' gradients after each stage
  // backward, grad_norm() takes theirs from it. Null: none.
  void set_expert_parallel(ExpertParallel* ep) { ep_ = ep; }
  // Whether this rank's stages hold parameter `name` (a model.named_parameters() name).
  bool owns(const std::string& name) const;
  // This rank's parameters, in model.named_parameters() order.
  std::vector<std::pair<std::string, Tensor>> parameters() const;
  // ("layers.i", block) for the blocks of this rank's stages (the FSDP units).
  std::vector<std::pair<std::string, const nn::Module*>> blocks() const;
  // Whether this rank holds the last stage (the loss).
  bool holds_last_stage() const;

  // One run of the schedule over micro[first .. first + n_microbatches): forwards,
  // losses, backwards; gradients accumulate into this rank's parameters (with fsdp:
  // reduced into its shards after each stage backward). Returns each microbatch's
  // Σ token CE (f64), the same on every pp rank. Collective over the pp group (and
  // fsdp's dp group).
  std::vector<double> train(const std::vector<data::Batch>& micro, size_t first, double inv_valid,
                            FullyShard* fsdp);
  // Forward only (under NoGradGuard): the final-normed hidden (T, D) on the rank that
  // holds the last stage, an undefined tensor elsewhere. Collective over the pp group.
  Tensor forward(const models::ForwardBatch& batch, FullyShard* fsdp);
  // Σ token CE of the batch (ignore_index -100), on every pp rank. Collective.
  double loss_sum(const data::Batch& batch, FullyShard* fsdp);

  // optim::grad_norm over the whole model's gradients, bit for bit, from this rank's
  // `params` (its optimizer's: full tensors, or with fsdp its shards). With tp, a
  // tp-sharded parameter's ‖g‖² is summed over tp in rank order, a replicated one taken
  // once. Collective over pp (and tp, fsdp's group).
  float grad_norm(const std::vector<optim::ParamRef>& params, FullyShard* fsdp);
  // optim::clip_grad_norm_ with the norm above; returns the norm.
  float clip_grad_norm_(const std::vector<optim::ParamRef>& params, double max_norm, FullyShard* fsdp);

  // Every parameter's full value on world rank 0 (for the HF export): the other stages'
  // ranks of rank 0's pp group send theirs. With tp every tp coordinate's pp group does
  // so, leaving the whole tp slice on each pp rank 0 (TensorParallel::gather_full_model
  // over their tp group then joins them). With fsdp every unit is gathered first (and
  // stays gathered). Collective over the world.
  void gather_parameters(FullyShard* fsdp);

  // v of the rank that holds the last stage, on every pp rank.
  int32_t broadcast_from_last(int32_t v);

  const PipelineStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 private:
  struct Pending;
  Tensor stage_forward(int stage, const models::ForwardBatch& batch, const Tensor& x) const;
  int stage_of_parameter(const std::string& name) const;
  Tensor recv_hidden(int64_t tokens, int src_rank, int tag);
  void send_hidden(const Tensor& t, int dst_rank, int tag);
  void wait_sends();

  models::Decoder& model_;
  const DeviceMesh& mesh_;
  ProcessGroup& group_;
  PipelinePlan plan_;
  TensorParallel* tp_ = nullptr;
  int rank_ = 0;
  std::vector<bool> mine_;  // per stage
  ContextParallel* cp_ = nullptr;
  ExpertParallel* ep_ = nullptr;
  std::vector<std::unique_ptr<Pending>> pending_;
  PipelineStats stats_;
};

}  // namespace titan::distributed
