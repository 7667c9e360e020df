// DeviceMesh: the world's ranks laid out on TorchTitan's named dimensions
// (torchtitan/distributed/parallel_dims.py), outermost first:
//
//     pp, dp_replicate, dp_shard, cp, tp        (tp varies fastest)
//
//     world rank = (((pp·R + dp_replicate)·S + dp_shard)·C + cp)·T + tp
//
// with R, S, C, T the degrees of dp_replicate, dp_shard, cp, tp. Every rank holds a
// process group for each dimension and for each set of dimensions (the ranks that
// differ only in those coordinates, ordered by the coordinates in the order above),
// e.g. {dp_replicate, dp_shard} is the data-parallel group of the batch and of the
// loss, {dp_shard, cp} the FSDP group when cp > 1.
//
// ep (expert parallelism) is carved from dp_shard × cp as in TorchTitan:
// dp_shard = dp_shard_mod_ep × dp_shard_in_ep, ep = dp_shard_in_ep × cp, the
// in-ep part being the inner (faster) factor of dp_shard; ep() is the group of the
// ranks that share pp, dp_replicate, dp_shard_mod_ep and tp.
#pragma once
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "titan/distributed/process_group.h"

namespace titan::distributed {

enum class MeshDim { pp = 0, dp_replicate = 1, dp_shard = 2, cp = 3, tp = 4 };
inline constexpr int kNumMeshDims = 5;
// "pp", "dp_replicate", ...
const char* mesh_dim_name(MeshDim d);

struct MeshShape {
  int pp = 1, dp_replicate = 1, dp_shard = 1, cp = 1, tp = 1;
  int ep = 1;  // carved from dp_shard × cp (header comment); 1 = no expert parallelism
  int size(MeshDim d) const;
  int world_size() const { return pp * dp_replicate * dp_shard * cp * tp; }
  // "pp=1 dp_replicate=1 dp_shard=2 cp=1 tp=1" (+ " ep=E" when ep > 1)
  std::string str() const;
};

class DeviceMesh {
 public:
  // Collective over `world` (every rank calls it with the same shape). Throws
  // titan::Error when a degree is < 1, the product of the degrees is not
  // world->size(), or ep does not divide as the header states.
  DeviceMesh(std::shared_ptr<ProcessGroup> world, const MeshShape& shape);
  ~DeviceMesh();

  const MeshShape& shape() const { return shape_; }
  int size(MeshDim d) const { return shape_.size(d); }
  // This rank's coordinate along d, in [0, size(d)).
  int coord(MeshDim d) const { return coords_[static_cast<int>(d)]; }
  int world_rank() const { return world_->rank(); }
  int world_size() const { return world_->size(); }
  // World rank of the given coordinates (one per MeshDim, in enum order).
  int rank_of(const std::array<int, kNumMeshDims>& coords) const;

  ProcessGroup& world() const { return *world_; }
  // The group of the ranks differing from this one only along `dims` (any order;
  // the group's rank order is the mesh order of the header). One dim: its group.
  ProcessGroup& group(std::initializer_list<MeshDim> dims) const;
  ProcessGroup& group(MeshDim d) const { return group({d}); }
  // {dp_replicate, dp_shard}: the ranks that read different rows of data.
  ProcessGroup& dp() const { return group({MeshDim::dp_replicate, MeshDim::dp_shard}); }
  // The expert-parallel group (size shape().ep).
  ProcessGroup& ep() const { return *ep_; }
  // Data-parallel index and count: this rank reads rows dp_rank() of dp_size().
  int dp_rank() const { return dp().rank(); }
  int dp_size() const { return dp().size(); }

 private:
  std::shared_ptr<ProcessGroup> world_;
  MeshShape shape_;
  std::array<int, kNumMeshDims> coords_{};
  // groups_[mask]: the group over the dims whose bits are set in mask (1 .. 31).
  std::array<std::unique_ptr<ProcessGroup>, 1 << kNumMeshDims> groups_;
  std::unique_ptr<ProcessGroup> ep_;
};

}  // namespace titan::distributed
