// Grouped-query softmax attention, the `gqa` mixer (TorchTitan names wq/wk/wv/wo,
// q_norm/k_norm), written once for the trainer (packed varlen) and the generator
// (paged K/V cache).
#pragma once
#include <memory>

#include "titan/models/common/layer_spec.h"
#include "titan/models/common/layers.h"

namespace titan::models {

// Grouped-query attention with optional QK-RMSNorm (qwen3) before RoPE (rotate-half, on
// the first cfg.rotary_dim() dims), and the optional sigmoid output gate of Qwen3-Next.
// Variants, all config flags that reach the flash kernels on both paths
// (kernels/cpu/attention.h): the layer's sliding window (spec.window), Gemma 2's score
// soft-cap (cfg.attn_logit_softcapping) and scale (cfg.query_pre_attn_scalar^-1/2),
// gpt-oss's per-head sink logits (cfg.attention_sinks: parameter `sinks` (H)), and
// Llama 4's NoPE layers (spec.use_rope false) with attention temperature tuning
// (queries at position p times 1 + attn_scale * log1p(floor((p + 1) / floor_scale))),
// its chunked local attention (spec.chunk), its weightless RMS norm of q and k after RoPE
// on the RoPE layers (cfg.use_qk_norm) and its interleaved-pair RoPE
// (cfg.rope_interleave_gqa); HF Llama4TextAttention.
class Attention : public Mixer {
 public:
  // rope: the decoder's shared fp32 tables (build_rope_tables), used when spec.use_rope.
  Attention(const TransformerConfig& cfg, const LayerSpec& spec, int layer_id,
            std::shared_ptr<const RopeCache> rope);
  // x (T, D) -> (T, D). Trainer path (batch.kv null): packed varlen attention
  // (differentiable). Generator path: writes K/V to cache->paged {k, v}, then attends
  // through the block tables. Throws titan::Error on the generator path without a
  // cache or with autograd recording.
  Tensor forward(const Tensor& x, const ForwardBatch& batch, LayerCache* cache) const override;
  // Paged K/V: k (Hkv, Dh, B) and v (Hkv, B, Dh) per block (kernels/cpu/attention.h).
  LayerCacheSpec cache_spec(int block_size) const override;
  // wq/wk/wv in-projections, wo a residual output (InitRole::out_proj), norms 1.
  void init_weights(const nn::InitContext& ctx) override;
  void repack_for_decode() override;
  Linear *wq, *wk, *wv, *wo;
  RMSNorm *q_norm = nullptr, *k_norm = nullptr;
  Tensor sinks;  // (H) f32 when cfg.attention_sinks, else undefined
  // Component overrides (models/common/overrides.h): the composed reference attention
  // instead of the flash kernel (trainer path), the composed RoPE instead of the fused one.
  bool reference_attention = false, composed_rope = false;

 private:
  std::shared_ptr<const RopeCache> rope_;
  int layer_id_;
  int64_t H_, Hkv_, Dh_, window_, chunk_;
  bool use_rope_;
  RopeStyle rope_style_;
  double qk_l2_eps_;  // use_qk_norm on a RoPE layer: the weightless norm's eps; < 0 = off
  bool gate_;  // cfg.attn_output_gate: out = attention · sigmoid(gate) before wo
  double scale_, softcap_;          // score scale (0 = 1/sqrt(Dh)) and soft-cap (0 = off)
  bool temperature_tuning_;         // NoPE layer with cfg.attn_temperature_tuning
  double floor_scale_, attn_scale_;
};

}  // namespace titan::models
