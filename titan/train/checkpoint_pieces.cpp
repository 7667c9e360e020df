#include "titan/train/checkpoint_pieces.h"

#include "titan/distributed/device_mesh.h"
#include "titan/distributed/expert_parallel.h"
#include "titan/distributed/fsdp.h"
#include "titan/distributed/pipeline.h"
#include "titan/distributed/tensor_parallel.h"

namespace titan {

namespace {

nlohmann::json placement_json(const std::string& mesh_dim, const std::string& placement) {
  return {{"mesh_dim", mesh_dim}, {"placement", placement}};
}

// `local` as rows [row_offset, row_offset + local rows) of a tensor with `rows` rows
// (the other dims whole).
ShardedTensor row_piece(const std::string& name, const Tensor& local, int64_t rows, int64_t row_offset,
                        const std::string& mesh_dim) {
  ShardedTensor s = sharded_full(name, local);
  s.global_shape[0] = rows;
  s.box.offsets[0] = row_offset;
  s.placements.push_back(placement_json(mesh_dim, "Shard(0)"));
  return s;
}

}  // namespace

std::vector<ShardedTensor> checkpoint_pieces(const models::Decoder& model, const distributed::DeviceMesh& mesh,
                                             const distributed::FullyShard* fsdp,
                                             const distributed::TensorParallel* tp,
                                             const distributed::ExpertParallel* ep, const distributed::Pipeline* pp) {
  using distributed::MeshDim;
  std::vector<ShardedTensor> out;
  if (fsdp) {
    const std::string over = mesh.size(MeshDim::cp) > 1 ? "dp_shard×cp" : "dp_shard";
    for (size_t i = 0; i < fsdp->shards().size(); ++i) {
      const auto& [name, shard] = fsdp->shards()[i];
      out.push_back(row_piece(name, shard, fsdp->full_shape(i)[0], fsdp->shard_rows(i).offset, over));
    }
  } else {
    for (auto& [name, p] : model.named_parameters())
      if (!pp || pp->owns(name)) out.push_back(sharded_full(name, p));
  }
  if (ep) {
    const int64_t n = mesh.ep().size(), e = mesh.ep().rank();
    for (const auto& [name, shard] : ep->shards())
      out.push_back(row_piece(name, shard, shard.size(0) * n, e * shard.size(0), "ep"));
  }
  if (tp) {
    const distributed::ProcessGroup& g = mesh.group(MeshDim::tp);
    for (ShardedTensor& s : out) {
      int d = -1;
      switch (tp->placement(s.name)) {
        case distributed::TensorParallel::Placement::replicate: break;
        case distributed::TensorParallel::Placement::shard_rows: d = 0; break;
        case distributed::TensorParallel::Placement::shard_cols: d = 1; break;
      }
      if (d >= 0) {
        const int64_t n = s.global_shape[d];  // the tp slice's extent
        s.global_shape[d] = n * g.size();
        s.box.offsets[d] += n * g.rank();
      }
      s.placements.insert(s.placements.begin(),
                          placement_json("tp", d < 0 ? "Replicate()" : "Shard(" + std::to_string(d) + ")"));
    }
  }
  for (auto& [name, b] : model.named_buffers())
    if (!pp || pp->owns(name)) out.push_back(sharded_full(name, b));
  return out;
}

std::set<std::string> checkpoint_names_elsewhere(const models::Decoder& model, const distributed::Pipeline* pp) {
  std::set<std::string> out;
  if (!pp) return out;
  for (auto& [name, t] : model.named_parameters())
    if (!pp->owns(name)) out.insert(name);
  for (auto& [name, t] : model.named_buffers())
    if (!pp->owns(name)) out.insert(name);
  return out;
}

}  // namespace titan
