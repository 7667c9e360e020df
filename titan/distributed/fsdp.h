// FullyShard: FSDP (dp_shard) and HSDP (dp_replicate × dp_shard) on the parameters of
// any nn::Module (TorchTitan's fully_shard per transformer block, FSDP2's semantics):
//
//  - every parameter is sharded on dim 0 over the dp_shard group (dp_shard × cp with
//    context parallelism, TorchTitan's fold of cp into FSDP) as torch.chunk does
//    (shard_range in dtensor.h; a DTensor with placement Shard(0)); the optimizer sees
//    only the shards, so gradients and optimizer state are sharded too;
//  - parameters are grouped in units: one per block module given (e.g. "layers.3",
//    holding the parameters named "layers.3.*"), and the root unit with the rest
//    (embeddings, final norm, LM head). A block's unit is all-gathered right before its
//    forward (a forward hook, nn/hooks.h) and, with reshard_after_forward (TorchTitan's
//    fsdp_reshard_after_forward "default"/"always"), freed after it; the output's
//    gradient node gathers it again for the block's backward and frees the later blocks
//    whose backward is done. Without it ("never") a forward that records autograd keeps
//    the block gathered until its backward has run (one all-gather per block and
//    microbatch instead of two; the buffers freed after the forward are held anyway by
//    the views the block's autograd nodes saved, so the peak is the same); a forward
//    without autograd (evaluation, or the no-grad
//    first pass of activation checkpointing) still frees it. The root unit is gathered
//    by unshard_root() before the step's forward and stays until reduce_gradients();
//  - reduce_gradients(), after each microbatch's backward, reduces each full gradient
//    to this rank's rows over the whole dp group (dp_replicate × dp_shard, × cp with
//    context parallelism) and adds it to the shard's gradient.
//
// Bits. Microbatch j of a step is processed by dp rank j mod dp (the trainer's
// assignment), and each shard's gradient is
//
//     g = ((g + m[k·dp + 0]) + m[k·dp + 1]) + ... + m[k·dp + dp − 1]   (micro step k)
//
// summed by reduce_pieces (reduction.h) in dp-rank order — the order in which a
// 1-rank run's AccumulateGrad adds the same microbatches (m[j] are identical: same rows,
// same batch-invariant kernels). HSDP therefore reduces over the whole dp group at
// once instead of reduce-scatter over dp_shard plus all-reduce over dp_replicate
// (which would sum in another order): (dp − 1)/dp_shard × gradient bytes per rank
// instead of TorchTitan's (S − 1)/S + 2(R − 1)/(R S). The gradient norm is formed from
// the same 4096-element blocks as optim::grad_norm (blocks that straddle shards are
// assembled whole), so it too is the 1-rank value bit for bit.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "titan/distributed/device_mesh.h"
#include "titan/distributed/dtensor.h"
#include "titan/nn/module.h"

namespace titan::distributed {

struct FsdpStats {
  int64_t all_gather_bytes = 0;    // bytes received by this rank's parameter all-gathers
  int64_t reduce_bytes = 0;        // bytes received by its gradient reductions
  double comm_ms = 0;              // wall time inside those collectives
  int64_t all_gathers = 0, reductions = 0;
};

class FullyShard {
 public:
  // Shards `root`'s parameters (their values must already be the same on every rank,
  // e.g. initialised from one seed) and frees the full copies. Collective over the
  // mesh's dp group. Throws titan::Error for a parameter that is not f32 or 0-d.
  // `include` (when set) picks the parameters to shard by name, e.g. a pipeline
  // stage's; the others are left alone.
  // `reshard_after_forward` (header comment) changes which all-gathers run, never a
  // value: gathered weights are the shards' bits either way.
  FullyShard(nn::Module& root, const DeviceMesh& mesh,
             const std::vector<std::pair<std::string, const nn::Module*>>& blocks,
             const std::function<bool(const std::string&)>& include = {}, bool reshard_after_forward = true);
  ~FullyShard();
  FullyShard(const FullyShard&) = delete;
  FullyShard& operator=(const FullyShard&) = delete;

  // (name, shard) for the optimizer, in root.named_parameters() order: contiguous f32
  // leaves requiring grad, rows shard_range(dim0, dp_shard, coord(dp_shard)).
  const std::vector<std::pair<std::string, Tensor>>& shards() const { return shards_; }
  // Each shard as a DTensor (placement Shard(0) over dp_shard). Throws with cp > 1.
  DTensor sharded_parameter(size_t i) const;
  // Shard i's parameter: its full shape and this rank's rows of it,
  // shard_range(dim0, |dp_shard × cp|, rank in that group) (also with cp > 1).
  const Shape& full_shape(size_t i) const;
  ShardRange shard_rows(size_t i) const;

  // Gathers the root unit (before each forward of the step's microbatches).
  void unshard_root();
  // After a microbatch's backward: reduces every full gradient into the shards'
  // gradients (header comment) and frees all full parameters and gradients.
  void reduce_gradients();
  // A microbatch without data, for a rank that has fewer microbatches in a step than
  // its dp peers: takes part in exactly the collectives of one forward + backward +
  // reduce_gradients() (the root and every block gathered in forward order, the blocks
  // again in backward order, then the gradient reduction), contributing a gradient of
  // -0.0 for every parameter. -0.0 is the identity of IEEE addition (x + -0.0 == x
  // for every x, +0.0 and -0.0 included), so the shards' gradients keep the bits of
  // the microbatches the other ranks processed. Needs the peers' real microbatches to
  // give every parameter a gradient (true for a decoder's whole-model loss).
  void skip_microbatch();
  // Gathers every unit: the module's parameters hold their full values (export,
  // sampling); block hooks still free a block after its forward.
  void unshard_all();
  // Frees every gathered unit (after a forward without backward, e.g. evaluation).
  void reshard_all();

  // optim::grad_norm over the shards' gradients, equal bit for bit to it over the
  // full gradients (header comment). Collective over dp_shard.
  float grad_norm();
  // The squared norms ‖g‖² (f64) of grad_norm per parameter, in shards() order (0 for
  // one without a gradient): grad_norm() is √ of their sum in that order. Collective.
  std::vector<double> grad_norm_sq_parts();
  // optim::clip_grad_norm_ on the shards with the norm above; returns the norm.
  float clip_grad_norm_(double max_norm);

  // Full tensors (name, value), gathered on every rank: the state for checkpoints and
  // exports. Collective over dp_shard.
  std::vector<std::pair<std::string, Tensor>> full_parameters();
  // Copies full values (e.g. a loaded checkpoint) into the shards: rows of this rank.
  void load_full_parameters(const std::vector<std::pair<std::string, Tensor>>& full);

  const FsdpStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 private:
  struct Param;
  struct Unit;
  class Hook;
  void unshard(Unit& u);
  void reshard(Unit& u);
  void pre_backward(size_t unit);

  void post_forward(size_t unit, bool backward_follows);

  const DeviceMesh& mesh_;
  const bool reshard_after_forward_;
  ProcessGroup& shard_group_;
  ProcessGroup& dp_group_;
  std::vector<std::unique_ptr<Unit>> units_;  // units_[0] = root
  std::vector<std::pair<std::string, Tensor>> shards_;
  std::vector<Param*> params_;  // in shards_ order
  FsdpStats stats_;
};

}  // namespace titan::distributed
