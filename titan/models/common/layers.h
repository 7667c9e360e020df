// Building blocks of the shared decoder (TorchTitan names: wq/wk/wv/wo, w1/w2/w3,
// attention_norm/ffn_norm). Each is written once and serves trainer and generator.
#pragma once
#include <memory>
#include <vector>

#include "titan/models/common/config.h"
#include "titan/models/common/forward_batch.h"
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
  // ids (T) i32 -> (T, dim): embedding(weight, ids), or embedding_panels once repacked
  // (the same bits).
  Tensor forward(const Tensor& ids) const;

 private:
  int64_t num_;
};

class RMSNorm : public nn::Module {
 public:
  RMSNorm(int64_t dim, double eps);
  Tensor forward(const Tensor& x) const;  // normalises the last dim
  Tensor weight;
  double eps;
};

// fp32 RoPE tables (P, R/2) for the config, computed in double and rounded once.
RopeCache build_rope_tables(const TransformerConfig& cfg);

// Grouped-query attention with optional QK-RMSNorm (qwen3) before RoPE (rotate-half).
class Attention : public nn::Module {
 public:
  Attention(const TransformerConfig& cfg, int layer_id);
  // x (T, D) -> (T, D). Trainer path: packed varlen attention (differentiable).
  // Generator path: writes K/V to the paged cache, then attends through block tables.
  Tensor forward(const Tensor& x, const ForwardBatch& batch, const RopeCache& rope) const;
  Linear *wq, *wk, *wv, *wo;
  RMSNorm *q_norm = nullptr, *k_norm = nullptr;

 private:
  int layer_id_;
  int64_t H_, Hkv_, Dh_, window_;
};

// SwiGLU feed-forward: w2(silu(w1 x) * w3 x).
class FeedForward : public nn::Module {
 public:
  FeedForward(int64_t dim, int64_t hidden);
  Tensor forward(const Tensor& x) const;
  Linear *w1, *w2, *w3;
};

// Pre-norm block: h = x + attn(norm(x)); out = h + ffn(norm(h)).
class TransformerBlock : public nn::Module {
 public:
  TransformerBlock(const TransformerConfig& cfg, int layer_id);
  Tensor forward(const Tensor& x, const ForwardBatch& batch, const RopeCache& rope) const;
  RMSNorm *attention_norm, *ffn_norm;
  Attention* attention;
  FeedForward* feed_forward;
};

}  // namespace titan::models
