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

  // ---- both paths: sequence s is tokens [cu[s], cu[s+1]) (S + 1) i32. On the generator
  // path sequence s is row s of block_tables (its tokens of this step, consecutive
  // positions).
  Tensor cu_seqlens;

  // ---- generator path (kv != nullptr): the cache the model declared (cache_spec.h);
  // the decoder hands layer l its LayerCache kv->layers[l].
  ModelCache* kv = nullptr;
  Tensor block_tables;  // (num_seqs, max_blocks) i32
  Tensor seq_ids;       // (T) i32: row of block_tables for each token
  Tensor slot_mapping;  // (T) i64: cache slot (block * B + offset) each token's K/V goes to
  // Recurrent layers (models whose cache_spec declares state): row of the layers' state
  // tensors that sequence s resumes from and updates, (S) i64; and the prefix cache's
  // snapshots: snapshot_slots[s] (S) i64, -1 for none, receives sequence s's state as it
  // stands before absolute position snapshot_pos[s] (S) i64 (a KV block boundary within
  // or at the end of this step's tokens). Undefined when the model has no state.
  Tensor state_slots, snapshot_slots, snapshot_pos;

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
