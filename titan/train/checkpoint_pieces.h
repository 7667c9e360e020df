// The pieces of a training run's model that a rank writes to (and reads from) a
// distributed checkpoint (distributed_checkpoint.h): each is a box of the full model's
// tensor, so a checkpoint written on one layout loads on any other.
#pragma once
#include <set>
#include <string>
#include <vector>

#include "titan/checkpoint/distributed_checkpoint.h"
#include "titan/models/common/decoder.h"

namespace titan::distributed {
class DeviceMesh;
class FullyShard;
class TensorParallel;
class ExpertParallel;
class Pipeline;
}  // namespace titan::distributed

namespace titan {

// This rank's pieces of the model's parameters and buffers, named as in the full
// (1-rank) model, with global shapes of the full model:
//  - FSDP (fsdp given): the rows FullyShard::shard_rows of each parameter it shards,
//    placement Shard(0) over dp_shard ("dp_shard×cp" with context parallelism: one
//    torch.chunk split over the flattened group, as FSDP cuts it);
//  - EP (ep given): the routed experts [i E/ep, (i+1) E/ep) of ep rank i, Shard(0)
//    over ep (the expert-dp replicas give the same box: written once);
//  - without FSDP: every parameter of `model` whole;
//  - TP (tp given): each parameter's piece above is a piece of the rank's tp slice:
//    colwise and vocab-parallel parameters Shard(0) over tp (rows offset by
//    tp_rank × local rows), rowwise Shard(1) (columns likewise), the norms Replicate
//    (the same box on every tp rank: written once). Placements nest tp first, then
//    dp_shard, as DTensor's do;
//  - buffers (e.g. the MoE routers' expert bias) whole;
//  - PP (pp given): only the parameters and buffers of this rank's stages (FSDP shards
//    only those), each whole or as its FSDP piece above, so the pp ranks' pieces are
//    disjoint sets of tensors that together name every tensor of the model once (the
//    index has no pp placement: a stage holds its tensors whole, as TorchTitan's
//    per-stage state dicts do).
// No communication. The tensors are the rank's live ones (load_sharded fills them in place).
std::vector<ShardedTensor> checkpoint_pieces(const models::Decoder& model, const distributed::DeviceMesh& mesh,
                                             const distributed::FullyShard* fsdp,
                                             const distributed::TensorParallel* tp,
                                             const distributed::ExpertParallel* ep, const distributed::Pipeline* pp);

// The names of the model's parameters and buffers that other pp ranks hold (empty
// without pp): the checkpoint tensors a load on this rank skips (load_sharded).
std::set<std::string> checkpoint_names_elsewhere(const models::Decoder& model, const distributed::Pipeline* pp);

}  // namespace titan
