// The local half of a vocabulary-parallel embedding (Megatron-LM's
// VocabParallelEmbedding, TorchTitan's RowwiseParallel on tok_embeddings): a rank holds
// the rows [vocab_start, vocab_start + V_local) of the (V, D) table, looks up the ids it
// owns and gives zero rows for the others; the sum of the ranks' outputs over the
// tensor-parallel group (titan/distributed/tensor_parallel.h) is the full lookup,
// exactly (x + 0 = x).
#pragma once
#include <cstdint>

#include "titan/core/tensor.h"

namespace titan {

// out (ids.shape..., D) f32: out[t] = weight[ids[t] - vocab_start] when vocab_start <=
// ids[t] < vocab_start + V_local, else 0. weight (V_local, D) f32, ids i32/i64 in
// [0, vocab_size). Backward: dweight (V_local, D) f32, rows scatter-added in token
// order (as embedding()). Errors (titan::Error): an id outside [0, vocab_size), a shard
// that does not fit in the vocabulary, a weight that is not 2-D f32.
Tensor embedding_vocab_shard(const Tensor& weight, const Tensor& ids, int64_t vocab_start, int64_t vocab_size);

}  // namespace titan
