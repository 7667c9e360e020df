#include "titan/distributed/device_mesh.h"

#include <fmt/format.h>

#include "titan/core/error.h"

namespace titan::distributed {

const char* mesh_dim_name(MeshDim d) {
  switch (d) {
    case MeshDim::pp: return "pp";
    case MeshDim::dp_replicate: return "dp_replicate";
    case MeshDim::dp_shard: return "dp_shard";
    case MeshDim::cp: return "cp";
    case MeshDim::tp: return "tp";
  }
  return "?";
}

int MeshShape::size(MeshDim d) const {
  switch (d) {
    case MeshDim::pp: return pp;
    case MeshDim::dp_replicate: return dp_replicate;
    case MeshDim::dp_shard: return dp_shard;
    case MeshDim::cp: return cp;
    case MeshDim::tp: return tp;
  }
  return 1;
}

std::string MeshShape::str() const {
  std::string s = fmt::format("pp={} dp_replicate={} dp_shard={} cp={} tp={}", pp, dp_replicate, dp_shard, cp, tp);
  if (ep > 1) s += fmt::format(" ep={}", ep);
  return s;
}

DeviceMesh::DeviceMesh(std::shared_ptr<ProcessGroup> world, const MeshShape& shape)
    : world_(std::move(world)), shape_(shape) {
  TITAN_CHECK(world_ != nullptr, "DeviceMesh: no world group");
  for (int d = 0; d < kNumMeshDims; ++d)
    TITAN_CHECK(shape_.size(static_cast<MeshDim>(d)) >= 1, "device mesh {}: degree {} must be >= 1", shape_.str(),
                mesh_dim_name(static_cast<MeshDim>(d)));
  TITAN_CHECK(int64_t{shape_.pp} * shape_.dp_replicate * shape_.dp_shard * shape_.cp * shape_.tp ==
                  world_->size(),
              "device mesh {}: the product of the degrees is {}, but the world has {} ranks", shape_.str(),
              int64_t{shape_.pp} * shape_.dp_replicate * shape_.dp_shard * shape_.cp * shape_.tp, world_->size());
  TITAN_CHECK(shape_.ep == 1 || (shape_.ep > 1 && shape_.ep % shape_.cp == 0 && (shape_.dp_shard * shape_.cp) % shape_.ep == 0),
              "device mesh {}: ep must be 1 (none) or a multiple of cp that divides dp_shard × cp = {}", shape_.str(),
              shape_.dp_shard * shape_.cp);
  // Coordinates of this rank, tp fastest.
  int r = world_->rank();
  for (int d = kNumMeshDims - 1; d >= 0; --d) {
    const int n = shape_.size(static_cast<MeshDim>(d));
    coords_[d] = r % n;
    r /= n;
  }
  // One split per set of dims: color = the coordinates outside the set, key = inside.
  for (int mask = 1; mask < (1 << kNumMeshDims); ++mask) {
    int color = 0, key = 0, members = 1;
    for (int d = 0; d < kNumMeshDims; ++d) {
      const int n = shape_.size(static_cast<MeshDim>(d));
      if (mask & (1 << d)) {
        key = key * n + coords_[d];
        members *= n;
      } else {
        color = color * n + coords_[d];
      }
    }
    // Every rank takes the same branch for a given mask (members depends on the shape only).
    if (members == 1)
      groups_[mask] = std::make_unique<LocalProcessGroup>(world_->rank());
    else
      groups_[mask] = world_->split(color, key);
  }
  // ep: dp_shard = mod_ep × in_ep, ep = in_ep × cp.
  const int in_ep = shape_.ep / shape_.cp;
  if (shape_.ep == 1) {
    ep_ = std::make_unique<LocalProcessGroup>(world_->rank());
  } else {
    const int s = coords_[static_cast<int>(MeshDim::dp_shard)];
    const int mod_ep = s / in_ep, in = s % in_ep;
    const int color =
        ((coords_[0] * shape_.dp_replicate + coords_[1]) * (shape_.dp_shard / in_ep) + mod_ep) * shape_.tp +
        coords_[4];
    ep_ = world_->split(color, in * shape_.cp + coords_[3]);
  }
}

DeviceMesh::~DeviceMesh() = default;

int DeviceMesh::rank_of(const std::array<int, kNumMeshDims>& c) const {
  int r = 0;
  for (int d = 0; d < kNumMeshDims; ++d) {
    const int n = shape_.size(static_cast<MeshDim>(d));
    TITAN_CHECK(c[d] >= 0 && c[d] < n, "DeviceMesh::rank_of: {} coordinate {} outside [0, {})",
                mesh_dim_name(static_cast<MeshDim>(d)), c[d], n);
    r = r * n + c[d];
  }
  return r;
}

ProcessGroup& DeviceMesh::group(std::initializer_list<MeshDim> dims) const {
  int mask = 0;
  for (MeshDim d : dims) mask |= 1 << static_cast<int>(d);
  TITAN_CHECK(mask != 0, "DeviceMesh::group: no dimensions");
  return *groups_[mask];
}

}  // namespace titan::distributed
