// ForwardBatch: what Model::forward consumes (DESIGN.md §1.1). The token stream is
// flat and packed — no batch dimension inside the model. The trainer and the
// generator differ ONLY in the attention metadata:
//   trainer:   cu_seqlens (packed documents, no attention across them), autograd on;
//   generator: a paged KV cache (block tables, slot mapping), autograd off.
#pragma once
#include <vector>

#include "titan/core/tensor.h"
#include "titan/kernels/cpu/attention.h"
#include "titan/models/common/cache_spec.h"

namespace titan::models {

struct ForwardBatch {
  Tensor tokens;     // (T) i32
  Tensor positions;  // (T) i32: position within its sequence (restarts at 0 per document)

  // ---- trainer path (kv == nullptr)
  Tensor cu_seqlens;  // (S + 1) i32: sequence s is tokens [cu[s], cu[s+1])

  // ---- generator path (kv != nullptr): the cache the model declared (cache_spec.h);
  // the decoder hands layer l its LayerCache kv->layers[l].
  ModelCache* kv = nullptr;
  Tensor block_tables;  // (num_seqs, max_blocks) i32
  Tensor seq_ids;       // (T) i32: row of block_tables for each token
  Tensor slot_mapping;  // (T) i64: cache slot (block * B + offset) each token's K/V goes to

  // KV block size the trainer-side attention visits keys with. Parity with the
  // generator requires it to equal the cache's block size (the default).
  int attn_block_size = kernels::cpu::kKvBlockSize;

  // Optional sink for the routers' choices: when set, the FFN of each MoE layer l
  // stores its (T, K) i32 top-k expert indices (ascending expert index per token) at
  // (*routed_experts)[l] (resized to the number of layers; dense layers leave theirs
  // undefined). Used by the HF oracle tests and RL's routing_mismatch_frac.
  std::vector<Tensor>* routed_experts = nullptr;

  int64_t num_tokens() const { return tokens.numel(); }
  bool is_paged() const { return kv != nullptr; }
};

// A trainer batch for one packed sequence list: tokens of each document back to back.
// Builds tokens, positions (0.. per document) and cu_seqlens. Throws on empty input.
ForwardBatch make_packed_batch(const std::vector<std::vector<int32_t>>& documents);

}  // namespace titan::models
