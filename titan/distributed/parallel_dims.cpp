#include "titan/distributed/parallel_dims.h"

#include <fmt/format.h>

#include "titan/core/error.h"

namespace titan::distributed {

MeshShape resolve_parallel_dims(const config::JobConfig& job, int world_size, const ModelDims& m) {
  const config::ParallelismConfig& p = job.parallelism;
  MeshShape s;
  s.pp = p.pipeline_parallel_degree;
  s.dp_replicate = p.data_parallel_replicate_degree;
  s.cp = p.context_parallel_degree;
  s.tp = p.tensor_parallel_degree;
  const int64_t others = int64_t{s.pp} * s.dp_replicate * s.cp * s.tp;
  if (p.data_parallel_shard_degree == -1) {
    TITAN_CHECK(others <= world_size && world_size % others == 0,
                "parallelism: data_parallel_shard_degree=-1 takes the rest of the world, but "
                "pipeline_parallel_degree ({}) × data_parallel_replicate_degree ({}) × context_parallel_degree "
                "({}) × tensor_parallel_degree ({}) = {} does not divide the {} ranks",
                s.pp, s.dp_replicate, s.cp, s.tp, others, world_size);
    s.dp_shard = static_cast<int>(world_size / others);
  } else {
    s.dp_shard = p.data_parallel_shard_degree;
  }
  const int64_t product = others * s.dp_shard;
  TITAN_CHECK(product == world_size,
              "parallelism: pipeline_parallel_degree ({}) × data_parallel_replicate_degree ({}) × "
              "data_parallel_shard_degree ({}) × context_parallel_degree ({}) × tensor_parallel_degree ({}) = {}, "
              "but the world has {} rank{} (mpirun -np)",
              s.pp, s.dp_replicate, s.dp_shard, s.cp, s.tp, product, world_size, world_size == 1 ? "" : "s");
  auto tp_divides = [&](int64_t v, const char* what) {
    TITAN_CHECK(v % s.tp == 0, "parallelism.tensor_parallel_degree={} does not divide the model's {} ({})", s.tp,
                what, v);
  };
  tp_divides(m.n_heads, "attention heads");
  tp_divides(m.n_kv_heads, "key/value heads");
  tp_divides(m.ffn_hidden_dim, "FFN hidden width");
  tp_divides(m.vocab_size, "vocabulary size");
  TITAN_CHECK(s.pp <= m.n_layers, "parallelism.pipeline_parallel_degree={} is more stages than the model's {} layers",
              s.pp, m.n_layers);
  TITAN_CHECK(job.training.seq_len % (2 * s.cp) == 0,
              "training.seq_len={} must be divisible by 2 × parallelism.context_parallel_degree = {} "
              "(each cp rank takes one head and one tail chunk)",
              job.training.seq_len, 2 * s.cp);
  s.ep = p.expert_parallel_degree;
  TITAN_CHECK(s.ep == 1 || (s.ep % s.cp == 0 && (int64_t{s.dp_shard} * s.cp) % s.ep == 0),
              "parallelism.expert_parallel_degree={} must be a multiple of context_parallel_degree ({}) and divide "
              "data_parallel_shard_degree × context_parallel_degree = {} (ep is carved from them)",
              s.ep, s.cp, int64_t{s.dp_shard} * s.cp);
  TITAN_CHECK(s.ep == 1 || (m.num_experts > 0 && m.num_experts % s.ep == 0),
              "parallelism.expert_parallel_degree={} {}", s.ep,
              m.num_experts > 0 ? fmt::format("does not divide the model's {} routed experts", m.num_experts)
                                : std::string("needs a mixture-of-experts model (this model has no routed experts)"));
  const int64_t dp = int64_t{s.dp_replicate} * s.dp_shard;
  int64_t per_micro = 0;
  TITAN_CHECK(!__builtin_mul_overflow(job.training.local_batch_size, dp, &per_micro),
              "training.local_batch_size={} × data-parallel degree {} overflows int64", job.training.local_batch_size,
              dp);
  TITAN_CHECK(config::effective_global_batch_size(job, world_size) % per_micro == 0,
              "training.global_batch_size={} must be a multiple of training.local_batch_size ({}) × data-parallel "
              "degree ({}) = {}",
              job.training.global_batch_size, job.training.local_batch_size, dp, per_micro);
  return s;
}

void refuse_unimplemented(const MeshShape& s) {
  TITAN_CHECK(s.cp == 1 || s.tp == 1 || s.pp == 1,
              "parallelism.context_parallel_degree={} with tensor_parallel_degree={} and "
              "pipeline_parallel_degree={}: context parallelism with both tensor and pipeline parallelism is not "
              "supported (it composes with each of them, and with FSDP/HSDP)",
              s.cp, s.tp, s.pp);
  TITAN_CHECK(s.ep == 1 || s.tp == 1 || s.pp == 1,
              "parallelism.expert_parallel_degree={} with tensor_parallel_degree={} and "
              "pipeline_parallel_degree={}: expert parallelism with both tensor and pipeline parallelism is not "
              "supported (it composes with each of them, and with FSDP/HSDP)",
              s.ep, s.tp, s.pp);
}

}  // namespace titan::distributed
