// Building blocks of the shared decoder: Linear, Embedding, RMSNorm, the RoPE tables and
// the base classes of a layer's mixer and feed-forward. Each is written once and serves
// trainer and generator.
#pragma once
#include <memory>
#include <vector>

#include "titan/models/common/cache_spec.h"
#include "titan/models/common/config.h"
#include "titan/models/common/forward_batch.h"
#include "titan/nn/init.h"
#include "titan/nn/module.h"
#include "titan/ops/rope.h"

namespace titan::models {

// A module whose `weight` (rows, in) f32, registered by the subclass, the generator's
// load step can repack for decode.
class PanelRepackable : public nn::Module {
 public:
  // Inference only (Decoder::repack_for_decode): replaces `weight` by its panel layout
  // (repack_linear_weight: [ceil(rows / w), in, w]), also as the registered parameter,
  // and drops the (rows, in) copy. forward then streams each weight panel in address
  // order at decode; it has no backward, and sync_weights, HF loading and hf_state_dict
  // refuse the changed shape. Idempotent.
  void repack_for_decode();
  bool repacked() const { return repacked_; }
  Tensor weight;

 private:
  bool repacked_ = false;
};

// y = x Wᵀ (+ b). weight (out, in) f32.
class Linear : public PanelRepackable {
 public:
  Linear(int64_t in, int64_t out, bool bias);
  // weight for `role` in layer `layer_id` (nn::InitContext::init), bias 0.
  void init(const nn::InitContext& ctx, nn::InitRole role, int layer_id);
  // The default: an input projection outside the layers' depth scaling.
  void init_weights(const nn::InitContext& ctx) override { init(ctx, nn::InitRole::in_proj, -1); }
  // x (T, in) -> (T, out): linear(x, weight, bias), or linear_panels once repacked
  // (the same bits).
  Tensor forward(const Tensor& x) const;
  Tensor bias;

 private:
  int64_t out_features_;
};

// weight (num, dim) f32; repacked only when it is also the (tied) LM head.
class Embedding : public PanelRepackable {
 public:
  Embedding(int64_t num, int64_t dim);
  void init_weights(const nn::InitContext& ctx) override;  // InitRole::embedding
  // ids (T) i32 -> (T, dim): embedding(weight, ids), or embedding_panels once repacked
  // (the same bits).
  Tensor forward(const Tensor& ids) const;

 private:
  int64_t num_;
};

class RMSNorm : public nn::Module {
 public:
  // unit_offset: the gain is (1 + weight), weight initialised to 0 (Qwen3-Next, Gemma).
  RMSNorm(int64_t dim, double eps, bool unit_offset = false);
  void init_weights(const nn::InitContext& ctx) override;  // weight = 1 (0 with unit_offset)
  Tensor forward(const Tensor& x) const;  // normalises the last dim
  Tensor weight;
  double eps;
  bool unit_offset;
};

// fp32 RoPE tables (P, R/2) for the config, computed in double and rounded once.
RopeCache build_rope_tables(const TransformerConfig& cfg);

// A module whose forward takes the layer's input and the batch: a token mixer or a
// feed-forward of one decoder layer (DESIGN.md §7). `cache` is the layer's slice of
// the generator's cache (batch.kv->layers[l]), null on the trainer path.
class LayerComponent : public nn::Module {
 public:
  // x (T, D) f32 -> (T, D) f32.
  virtual Tensor forward(const Tensor& x, const ForwardBatch& batch, LayerCache* cache) const = 0;
  // What the generator caches for this component (empty: nothing).
  virtual LayerCacheSpec cache_spec(int block_size) const { (void)block_size; return {}; }
  // Inference only: repacks the component's projection weights for decode
  // (PanelRepackable::repack_for_decode); the default does nothing.
  virtual void repack_for_decode() {}
};

// A token mixer (attention and its successors); register it as "attention".
class Mixer : public LayerComponent {};
// A feed-forward; register it as "feed_forward" (dense) or "moe".
class FeedForwardBase : public LayerComponent {};

}  // namespace titan::models
