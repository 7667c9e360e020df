// DTensor: a tensor distributed over some dimensions of a DeviceMesh (torch.distributed
// .tensor's DTensor, DESIGN.md §8). It holds this rank's local piece, the global shape,
// the mesh dims it is distributed over and one placement per mesh dim:
//
//   Shard(d)   the tensor's dim d is split over the mesh dim's ranks like torch.chunk:
//              ceil(n / k) rows per rank, the last ranks may hold fewer or none
//              (shard_range below);
//   Replicate  every rank of the mesh dim holds the same values;
//   Partial    the value is the sum over the mesh dim's ranks of their local pieces
//              (summed in rank order when resolved, process_group.h).
//
// Placements nest in order: placements[0] splits the global tensor over mesh_dims[0],
// placements[1] splits that piece further over mesh_dims[1], and so on.
//
// Extension point: a placement kind is defined by three rules in dtensor.cpp — the
// extent of a rank's piece (local_extent), how a rank cuts its piece from a replicated
// tensor (take_piece) and how the pieces are assembled (to_replicate). FlexShard's
// Owned (whole parameters owned by one rank) and BlockShard (row blocks dealt round
// robin), which a distributed Muon needs, are added as new Placement::Kind values
// with those three rules; nothing else changes.
#pragma once
#include <string>
#include <vector>

#include "titan/core/tensor.h"
#include "titan/distributed/device_mesh.h"

namespace titan::distributed {

struct Placement {
  enum class Kind { shard, replicate, partial };
  Kind kind = Kind::replicate;
  int dim = 0;  // Shard only: the tensor dimension split

  static Placement Shard(int d) { return {Kind::shard, d}; }
  static Placement Replicate() { return {Kind::replicate, 0}; }
  static Placement Partial() { return {Kind::partial, 0}; }
  bool is_shard() const { return kind == Kind::shard; }
  bool operator==(const Placement& o) const { return kind == o.kind && (kind != Kind::shard || dim == o.dim); }
  std::string str() const;  // "Shard(0)", "Replicate()", "Partial(sum)"
};

// torch.chunk's split of n rows into `parts`: part i is [offset, offset + length) with
// chunk = ceil(n / parts), offset = min(i·chunk, n), length = min(chunk, n − offset).
struct ShardRange {
  int64_t offset = 0, length = 0;
};
ShardRange shard_range(int64_t n, int parts, int index);

class DTensor {
 public:
  DTensor() = default;
  // Wraps this rank's piece. Throws titan::Error when the sizes disagree (local's shape
  // must be the piece of global_shape the placements give this rank) or a Shard dim is
  // out of range.
  DTensor(Tensor local, Shape global_shape, const DeviceMesh& mesh, std::vector<MeshDim> mesh_dims,
          std::vector<Placement> placements);
  // This rank's piece of `full` (the same global tensor on every rank): Shard takes
  // its chunk (a copy), Replicate keeps it, Partial keeps it on the mesh dim's rank 0
  // and zeros elsewhere. No communication.
  static DTensor distribute(const Tensor& full, const DeviceMesh& mesh, std::vector<MeshDim> mesh_dims,
                            std::vector<Placement> placements);

  const Tensor& local() const { return local_; }
  Tensor& local() { return local_; }
  const Shape& global_shape() const { return global_; }
  const std::vector<MeshDim>& mesh_dims() const { return dims_; }
  const std::vector<Placement>& placements() const { return placements_; }
  const DeviceMesh& mesh() const { return *mesh_; }
  // Offset and extent of this rank's piece in the global tensor, per tensor dim.
  std::vector<ShardRange> local_ranges() const;
  std::string str() const;  // "DTensor([8, 4], dp_shard: Shard(0), local [4, 4])"

  // The global tensor on every rank (collective over the mesh dims: all-gathers for
  // Shard, rank-order all-reduce for Partial).
  Tensor full_tensor() const;
  // The same global tensor with other placements (collective). Mesh dims from the
  // first one that changes to the last are resolved to Replicate (innermost first),
  // then cut to the target placements; Partial -> Shard(0) over one mesh dim with
  // dim 0 divisible by the group size is one reduce-scatter. Bits: the same as
  // full_tensor() followed by distribute().
  DTensor redistribute(std::vector<Placement> placements) const;

 private:
  Tensor local_;
  Shape global_;
  const DeviceMesh* mesh_ = nullptr;
  std::vector<MeshDim> dims_;
  std::vector<Placement> placements_;
};

}  // namespace titan::distributed
