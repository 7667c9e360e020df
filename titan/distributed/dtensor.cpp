#include "titan/distributed/dtensor.h"

#include <fmt/format.h>

#include <algorithm>

#include "titan/core/error.h"

namespace titan::distributed {

namespace {

// Permutation moving dim d to the front (and its inverse).
std::vector<int64_t> front_perm(int64_t ndim, int64_t d) {
  std::vector<int64_t> p{d};
  for (int64_t i = 0; i < ndim; ++i)
    if (i != d) p.push_back(i);
  return p;
}
std::vector<int64_t> inverse(const std::vector<int64_t>& p) {
  std::vector<int64_t> q(p.size());
  for (size_t i = 0; i < p.size(); ++i) q[p[i]] = static_cast<int64_t>(i);
  return q;
}

// ---- the rules of each placement kind (the extension point of the header)

// Extent along `dim` of the piece that rank `index` of `parts` holds.
ShardRange local_extent(const Placement& p, int64_t n, int parts, int index) {
  switch (p.kind) {
    case Placement::Kind::shard: return shard_range(n, parts, index);
    case Placement::Kind::replicate:
    case Placement::Kind::partial: return {0, n};
  }
  return {0, n};
}

// This rank's piece of a tensor replicated over the group.
Tensor take_piece(const Tensor& t, const Placement& p, const ProcessGroup& g) {
  switch (p.kind) {
    case Placement::Kind::shard: {
      const ShardRange r = shard_range(t.size(p.dim), g.size(), g.rank());
      return t.narrow(p.dim, r.offset, r.length).contiguous().clone();
    }
    case Placement::Kind::replicate: return t;
    case Placement::Kind::partial: {
      if (g.rank() == 0) return t;
      return Tensor::zeros(t.shape(), t.dtype());
    }
  }
  return t;
}

// The tensor replicated over the group, from every rank's piece. `full_extent` is
// the size of the assembled dim (Shard).
Tensor to_replicate(const Tensor& piece, const Placement& p, ProcessGroup& g) {
  switch (p.kind) {
    case Placement::Kind::shard: {
      if (g.size() == 1) return piece;
      const int64_t d = p.dim;
      if (d == 0) return g.all_gatherv(piece.contiguous());
      const std::vector<int64_t> perm = front_perm(piece.dim(), d);
      Tensor front = piece.permute(perm).contiguous();
      return g.all_gatherv(front).permute(inverse(perm)).contiguous();
    }
    case Placement::Kind::replicate: return piece;
    case Placement::Kind::partial: {
      Tensor out = piece.contiguous().clone();
      g.all_reduce(out, ReduceOp::sum);
      return out;
    }
  }
  return piece;
}

}  // namespace

std::string Placement::str() const {
  switch (kind) {
    case Kind::shard: return fmt::format("Shard({})", dim);
    case Kind::replicate: return "Replicate()";
    case Kind::partial: return "Partial(sum)";
  }
  return "?";
}

ShardRange shard_range(int64_t n, int parts, int index) {
  TITAN_CHECK(parts >= 1 && index >= 0 && index < parts, "shard_range: index {} of {} parts", index, parts);
  const int64_t chunk = (n + parts - 1) / parts;
  const int64_t off = std::min<int64_t>(chunk * index, n);
  return {off, std::min<int64_t>(chunk, n - off)};
}

DTensor::DTensor(Tensor local, Shape global_shape, const DeviceMesh& mesh, std::vector<MeshDim> mesh_dims,
                 std::vector<Placement> placements)
    : local_(std::move(local)),
      global_(std::move(global_shape)),
      mesh_(&mesh),
      dims_(std::move(mesh_dims)),
      placements_(std::move(placements)) {
  TITAN_CHECK(dims_.size() == placements_.size(), "DTensor: {} mesh dims but {} placements", dims_.size(),
              placements_.size());
  for (const Placement& p : placements_)
    TITAN_CHECK(!p.is_shard() || (p.dim >= 0 && p.dim < static_cast<int>(global_.size())),
                "DTensor: {} out of range for global shape {}", p.str(), shape_str(global_));
  Shape expect;
  for (const ShardRange& r : local_ranges()) expect.push_back(r.length);
  TITAN_CHECK(local_.shape() == expect, "DTensor {}: local piece has shape {}, the placements give {}",
              shape_str(global_), shape_str(local_.shape()), shape_str(expect));
}

std::vector<ShardRange> DTensor::local_ranges() const {
  std::vector<ShardRange> r;
  for (int64_t n : global_) r.push_back({0, n});
  for (size_t i = 0; i < dims_.size(); ++i) {
    const Placement& p = placements_[i];
    if (!p.is_shard()) continue;
    const ProcessGroup& g = mesh_->group(dims_[i]);
    const ShardRange s = local_extent(p, r[p.dim].length, g.size(), g.rank());
    r[p.dim] = {r[p.dim].offset + s.offset, s.length};
  }
  return r;
}

std::string DTensor::str() const {
  std::string s = "DTensor(" + shape_str(global_);
  for (size_t i = 0; i < dims_.size(); ++i)
    s += fmt::format(", {}: {}", mesh_dim_name(dims_[i]), placements_[i].str());
  return s + ", local " + shape_str(local_.shape()) + ")";
}

DTensor DTensor::distribute(const Tensor& full, const DeviceMesh& mesh, std::vector<MeshDim> mesh_dims,
                            std::vector<Placement> placements) {
  TITAN_CHECK(mesh_dims.size() == placements.size(), "DTensor::distribute: {} mesh dims but {} placements",
              mesh_dims.size(), placements.size());
  Tensor piece = full.detach();
  for (size_t i = 0; i < mesh_dims.size(); ++i) {
    TITAN_CHECK(!placements[i].is_shard() || (placements[i].dim >= 0 && placements[i].dim < full.dim()),
                "DTensor::distribute: {} out of range for shape {}", placements[i].str(), shape_str(full.shape()));
    piece = take_piece(piece, placements[i], mesh.group(mesh_dims[i]));
  }
  if (piece.storage() == full.storage()) piece = piece.contiguous().clone();
  return DTensor(piece, full.shape(), mesh, std::move(mesh_dims), std::move(placements));
}

Tensor DTensor::full_tensor() const {
  Tensor t = local_.detach();
  for (size_t i = dims_.size(); i-- > 0;) t = to_replicate(t, placements_[i], mesh_->group(dims_[i]));
  if (t.storage() == local_.storage()) t = t.contiguous().clone();
  return t;
}

DTensor DTensor::redistribute(std::vector<Placement> target) const {
  TITAN_CHECK(target.size() == placements_.size(), "DTensor::redistribute: {} placements for {} mesh dims",
              target.size(), placements_.size());
  size_t first = 0;
  while (first < target.size() && target[first] == placements_[first]) ++first;
  if (first == target.size()) return DTensor(local_.contiguous().clone(), global_, *mesh_, dims_, placements_);
  // Partial -> Shard(0) over the innermost mesh dim, evenly divisible: one reduce-scatter
  // (the same rank-order sum as all_reduce, then the same chunk).
  if (first + 1 == target.size() && placements_[first].kind == Placement::Kind::partial && target[first].is_shard() &&
      target[first].dim == 0) {
    ProcessGroup& g = mesh_->group(dims_[first]);
    if (local_.dim() >= 1 && local_.size(0) % g.size() == 0)
      return DTensor(g.reduce_scatter(local_.detach()), global_, *mesh_, dims_, target);
  }
  Tensor t = local_.detach();
  for (size_t i = target.size(); i-- > first;) t = to_replicate(t, placements_[i], mesh_->group(dims_[i]));
  for (size_t i = first; i < target.size(); ++i) t = take_piece(t, target[i], mesh_->group(dims_[i]));
  if (t.storage() == local_.storage()) t = t.contiguous().clone();
  return DTensor(t, global_, *mesh_, dims_, std::move(target));
}

}  // namespace titan::distributed
