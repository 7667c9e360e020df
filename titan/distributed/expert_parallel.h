// ExpertParallel: expert parallelism (EP) for the MoE layers of a Decoder in `titan
// train` (TorchTitan's expert_parallel_degree), on the mesh's ep group (device_mesh.h:
// ep = dp_shard_in_ep × cp, carved from dp_shard × cp).
//
// Layout. ep rank i holds the routed experts [i E/ep, (i+1) E/ep) of every MoE layer
// (moe.experts.w1/w2/w3 rows, shard_range); these are the optimizer's leaves for them.
// They are not FSDP-sharded: FullyShard is built without them, and they are replicated
// over the "expert-dp" ranks (same ep index, other dp_replicate / dp_shard_mod_ep
// coordinates). Every other parameter (router, shared experts, attention, ...) stays
// under FSDP as before.
//
// Forward of one MoE layer on each rank (its own microbatch, rows sorted by expert):
//   1. all-to-all of the per-expert row counts (ep group);
//   2. dispatch: all-to-all(v) of the rows, rank o receiving the rows of its experts
//      from every ep peer s, peer by peer, each peer's rows sorted by expert;
//   3. the owner runs its experts on each peer's rows separately (swiglu_experts, one
//      grouped GEMM per peer) with per-peer leaves sharing the shard's storage;
//   4. combine: all-to-all(v) back; the source rank receives the (N, D) rows in its own
//      order and combines each token's K outputs in ascending expert index as on one rank.
// Backward runs the same exchanges in reverse (autograd nodes that every rank records,
// since every rank routes some rows, possibly none, to every peer).
//
// Bits (tests/mpi/ep_train_test.cpp: losses and final weights memcmp-equal to 1 rank).
// A row's expert output depends on that row and its expert's weights only (grouped
// GEMM, batch-invariant), so it has the 1-rank bits on whichever rank computes it. The
// weight gradient of peer s's rows for local expert e is one GEMM over exactly the rows
// that peer's microbatch routes to e, in the same order: the 1-rank run's per-microbatch
// gradient m[j] of that expert. reduce_gradients() then sums these per-microbatch pieces
// in dp-rank order, g = ((g + m[k·dp]) + m[k·dp + 1]) + …, exchanging them over the
// expert-dp group (all-gather of the ep peers' pieces): the order in which one rank's
// AccumulateGrad adds microbatches, as FSDP does for the other parameters (fsdp.h).
// The gradient norm of an expert parameter is taken over its full gradient (gathered
// over ep) in optim::grad_norm's 4096-element blocks.
//
// Under pipeline parallelism each pp rank shards the MoE layers of its own stages (the
// ep and expert-dp groups are within one pp coordinate), and the pipeline reduces the
// experts' gradients after each stage backward, in microbatch order as above.
//
// Under tensor parallelism (without SP) every MoE layer is replicated over tp: each tp
// coordinate has its own ep and expert-dp groups, and its experts' gradients are full.
//
// Not covered (refused by the trainer): cp > 1, tp > 1 with pp > 1.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "titan/distributed/device_mesh.h"
#include "titan/models/common/decoder.h"

namespace titan::distributed {

struct EpStats {
  int64_t a2a_bytes = 0;        // bytes received by this rank's dispatch/combine exchanges (fwd + bwd)
  int64_t reduce_bytes = 0;     // bytes received by the expert-gradient exchange
  double comm_ms = 0;           // wall time in those collectives
};

class ExpertParallel {
 public:
  // Shards every MoE layer's routed experts over mesh.ep() (values must be the same on
  // every rank, e.g. initialised from one seed) and frees the full copies; installs
  // the dispatch on each MoE layer. Collective over the world (one group split).
  // Throws titan::Error when the model has no MoE layer or ep does not divide E.
  // holds_layer (pipeline parallelism): the layers of this rank's stages; the others'
  // experts are not touched (their storage is the other pp ranks'). Null: every layer.
  ExpertParallel(models::Decoder& model, const DeviceMesh& mesh,
                 const std::function<bool(int64_t layer)>& holds_layer = nullptr);
  ~ExpertParallel();
  ExpertParallel(const ExpertParallel&) = delete;
  ExpertParallel& operator=(const ExpertParallel&) = delete;

  // "layers.L.moe.experts.w1|w2|w3": the parameters EP owns (the others are FSDP's).
  static bool is_expert_parameter(const std::string& name);

  // (name, local experts) for the optimizer, in model order: contiguous f32 leaves
  // (E/ep, ...) requiring grad.
  const std::vector<std::pair<std::string, Tensor>>& shards() const { return shards_; }
  // After each microbatch's backward: adds the microbatch pieces of every local
  // expert's gradient into the shards' gradients in dp-rank order (header comment).
  // Collective over the expert-dp group.
  void reduce_gradients();
  // ‖g‖² (f64) per shard, in shards() order, of the full gradient in optim::grad_norm's
  // blocks (0 for one without a gradient). Collective over ep.
  std::vector<double> grad_norm_sq_parts();
  // Gathers the full expert tensors into the module's parameters (export); frees them.
  void unshard_all();
  void reshard_all();

  const EpStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

  struct Param;
  class Dispatch;

 private:
  const DeviceMesh& mesh_;
  std::unique_ptr<ProcessGroup> xdp_;  // expert-dp group; null when it has one rank
  std::vector<std::unique_ptr<Param>> params_;
  std::vector<std::pair<std::string, Tensor>> shards_;
  EpStats stats_;
};

}  // namespace titan::distributed
