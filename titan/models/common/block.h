// One decoder layer: a (mixer, feed-forward) pair chosen by its LayerSpec, pre-norm
// residual (DESIGN.md §7). Parameter names: layers.{l}.attention.* (the mixer),
// layers.{l}.feed_forward.* (dense) or layers.{l}.moe.* (MoE), attention_norm, ffn_norm.
#pragma once
#include <memory>

#include "titan/models/common/layer_spec.h"
#include "titan/models/common/layers.h"
#include "titan/models/ffn/dense.h"
#include "titan/models/mixers/attention.h"
#include "titan/models/mixers/gdn.h"
#include "titan/models/mixers/mla.h"
#include "titan/models/mixers/kda.h"

namespace titan::models {

class MoE;  // titan/models/ffn/moe.h

// Pre-norm block: h = x + mixer(attention_norm(x)); out = h + ffn(ffn_norm(h)).
// With cfg.post_norms (Gemma 2 sandwich, OLMo 2) the branch outputs are normed too:
// h = x + attention_post_norm(mixer(.)), out = h + ffn_post_norm(ffn(.)); with
// cfg.pre_norms off (OLMo 2) attention_norm / ffn_norm are absent (identity).
class TransformerBlock : public nn::Module {
 public:
  TransformerBlock(const TransformerConfig& cfg, const LayerSpec& spec, int layer_id,
                   std::shared_ptr<const RopeCache> rope);
  // x (T, D) -> (T, D); cache: this layer's slice of the generator's cache (null when
  // training).
  Tensor forward(const Tensor& x, const ForwardBatch& batch, LayerCache* cache) const;
  LayerCacheSpec cache_spec(int block_size) const;
  void repack_for_decode();

  const LayerSpec spec;
  Mixer* mixer;
  FeedForwardBase* ffn;
  RMSNorm *attention_norm = nullptr, *ffn_norm = nullptr;            // null without cfg.pre_norms
  RMSNorm *attention_post_norm = nullptr, *ffn_post_norm = nullptr;  // null without cfg.post_norms
  // Typed views of mixer / ffn (null when the layer has another kind).
  Attention* attention = nullptr;
  GatedDeltaNet* gdn = nullptr;
  MultiHeadLatentAttention* mla = nullptr;  // also a dsa layer (DeepSeekSparseAttention)
  KimiDeltaAttention* kda = nullptr;
  FeedForward* feed_forward = nullptr;
  MoE* moe = nullptr;
};

}  // namespace titan::models
