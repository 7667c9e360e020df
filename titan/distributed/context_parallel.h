// Context parallelism (CP): the sequence dimension of every batch is split over the
// mesh's cp group (TorchTitan's context_parallel, with its head-tail load balancing for
// causal attention), and softmax attention gathers K/V over cp.
//
// Layout. A batch of B rows of seq_len S (packed: T = B·S tokens) is cut, row by row,
// into 2·C chunks of L = S / (2C) tokens (C = cp degree); cp rank i holds chunks i and
// 2C − 1 − i of every row, in that order (Tl = T / C tokens), so that every rank has the
// same causal attention work. Every rank's model runs on its Tl tokens with their global
// positions (RoPE) and per-token layers unchanged; only the attention needs the others.
//
// Attention (attention()): K and V of the Tl local tokens are all-gathered over cp
// (backward: reduce-scattered, the sum over cp ranks in rank order, ProcessGroup's
// reduce rule) and put back into token order; the local queries are placed at their
// tokens of a (T, H, Dh) query tensor whose other rows are zero, and the packed varlen
// kernel (ops/attention.h) runs over the whole batch; the local rows of its output are
// this rank's. Each local query therefore visits the same keys, in the same KV blocks,
// in the same order, with the same bits as on one rank; a zero query row's output is
// discarded and, with a zero output gradient, it adds exact zeros to dK / dV. The
// kernel's work is that of the whole batch on every cp rank (the projections, FFN,
// norms, embedding and loss are split; the attention core is not yet).
//
// Bits. The forward (every layer's output, the logits, the per-token losses and their
// sum, gathered in token order) equals one rank's bit for bit. The backward does not:
// a key's dK / dV is the sum of the local queries' contributions per rank, added over
// ranks in rank order, where one rank's kernel adds all queries in token order; and a
// weight's gradient is a per-rank GEMM over Tl tokens summed over ranks (FSDP's reduce).
//
// Parameters are sharded by FSDP over dp_shard × cp (fsdp.h): gradients are summed
// over cp as over dp. Under PP each stage runs its microbatches this way (pipeline.h:
// shard() before each stage action, activations of the Tl local tokens between
// stages); under TP each cp rank runs its tokens through the tp model (the attention
// gathers the K/V of the rank's local heads). Covered: gqa attention with dense
// feed-forwards; refused (check_model): other mixers and MoE.
#pragma once
#include <cstdint>

#include "titan/distributed/tensor_parallel.h"
#include "titan/models/common/forward_batch.h"
#include "titan/models/mixers/context_parallel_attention.h"

namespace titan::distributed {

class ContextParallel final : public models::ContextParallelAttention {
 public:
  // cp: the mesh's cp group (size C >= 1).
  explicit ContextParallel(ProcessGroup& cp);

  // Throws titan::Error (naming parallelism.context_parallel_degree) for a model with a
  // layer that is not gqa attention + dense feed-forward, when cp > 1.
  static void check_model(const models::TransformerConfig& cfg, int cp);

  // This rank's share of a whole trainer batch: input (T tokens, T = rows · seq_len,
  // positions and cu_seqlens of the whole batch), targets (T) -> the Tl = T / C local
  // tokens, their positions and targets; cu_seqlens stays the whole batch's. Remembers
  // the layout for attention() and gather_rows() until the next shard(); the model runs
  // the local batch inside a models::ContextParallelScope(this), forward and backward.
  // Throws when T is not a multiple of seq_len or seq_len of 2C.
  struct Local {
    models::ForwardBatch input;
    Tensor targets;
  };
  Local shard(const models::ForwardBatch& input, const Tensor& targets, int64_t seq_len);

  // header comment; q (Tl, H, Dh), k, v (Tl, Hkv, Dh) contiguous f32.
  Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& opts) const override;

  // (Tl) f32 values of this rank's tokens -> (T) of the whole batch in token order
  // (an all-gather over cp; no gradient).
  Tensor gather_rows(const Tensor& local) const;

  int size() const { return comm_.size(); }
  // Bytes received and time of the cp collectives (K/V gathers, dK/dV reductions).
  TpStats& stats() const { return comm_.stats; }

 private:
  mutable TpComm comm_;
  Tensor cu_seqlens_;      // of the whole batch
  Tensor local_tokens_;    // (Tl) i64: the token of the whole batch at each local row
  Tensor from_gathered_;   // (T) i64: row of the rank-major all-gather holding token g
  Tensor query_rows_;      // (T) i64: local row of token g, or Tl (a zero row) if not local
  int64_t T_ = 0, Tl_ = 0;
};

}  // namespace titan::distributed
