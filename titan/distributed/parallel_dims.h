// ParallelDims: the [parallelism] degrees of a job resolved against the world size and
// checked against the model, before any work (TorchTitan's ParallelDims). Every rank
// runs the same checks on the same inputs, so a bad layout is the same one-line
// titan::Error (exit 2) on every rank.
#pragma once
#include <cstdint>

#include "titan/config/job_config.h"
#include "titan/distributed/device_mesh.h"

namespace titan::distributed {

// The model sizes a layout must divide.
struct ModelDims {
  int64_t n_layers = 1, n_heads = 1, n_kv_heads = 1, ffn_hidden_dim = 1, vocab_size = 1;
  int64_t num_experts = 0;  // routed experts of the MoE layers (0 = dense)
};

// Resolves data_parallel_shard_degree = -1 (world_size / the other degrees) and checks:
//  - the product pp × dp_replicate × dp_shard × cp × tp equals world_size;
//  - tp divides n_heads, n_kv_heads, ffn_hidden_dim and vocab_size;
//  - pp <= n_layers;
//  - training.seq_len is divisible by 2 × cp (head-tail load balancing);
//  - expert_parallel_degree (ep) is a multiple of cp dividing dp_shard × cp, and
//    divides num_experts (ep > 1 needs experts);
//  - training.global_batch_size is a multiple of local_batch_size × dp (dp_replicate × dp_shard).
// Throws titan::Error naming the key(s) and values.
MeshShape resolve_parallel_dims(const config::JobConfig& job, int world_size, const ModelDims& model);

// Refuses, with a one-line titan::Error, the degrees `titan train` does not implement
// (context or expert parallelism with both tensor and pipeline parallelism), so that no
// degree is accepted and then ignored.
void refuse_unimplemented(const MeshShape& shape);

}  // namespace titan::distributed
