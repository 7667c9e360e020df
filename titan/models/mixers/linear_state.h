// The part of the linear-attention mixers (Gated DeltaNet, Kimi Delta Attention) that
// differs between trainer and generator: the short causal conv1d and the delta rule,
// either over the packed training batch from zero state, or over the generator's state
// slots (cache_spec's "conv_tail" and "recurrent" rows, one per sequence, plus the prefix
// cache's snapshots). Both paths run the same kernels with chunks aligned to absolute
// positions, so a position gets the same bits either way (docs/linear-attention.md).
#pragma once
#include <string>
#include <vector>

#include "titan/models/common/forward_batch.h"

namespace titan::models {

class LinearMixerState {
 public:
  // Reads the generator's per-sequence metadata (cu_seqlens, state_slots, the first
  // position of each sequence, snapshot requests) when batch.is_paged(); the trainer
  // path keeps nothing. Throws titan::Error naming `who` when the generator path lacks
  // the layer's two state tensors or the batch's state_slots / cu_seqlens.
  LinearMixerState(const ForwardBatch& batch, LayerCache* cache, int64_t T, const std::string& who);

  // silu is not applied. x (T, C), w (C, W) -> (T, C): causal_conv1d (trainer) or the
  // conv over each sequence's tail row (generator; tails updated, snapshots written).
  Tensor conv1d(const Tensor& x, const Tensor& w) const;
  // q, k (T, Hk, K), v (T, H, V), g (T, H) or (T, H, K), beta (T, H) -> (T, H, V):
  // chunk_gated_delta_rule / chunk_kda (trainer) or gated_delta_rule_slots (generator).
  Tensor delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                    const Tensor& beta) const;

 private:
  const ForwardBatch& batch_;
  LayerCache* cache_;
  std::vector<int64_t> cu_, start_, slots_, snap_slot_, snap_pos_;
};

}  // namespace titan::models
