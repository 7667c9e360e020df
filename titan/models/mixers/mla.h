// Multi-head Latent Attention, the `mla` mixer of DeepSeek-V2/V3 and Kimi K2
// (DeepSeek-AI 2024, "DeepSeek-V2", §2.1; HF DeepseekV3Attention). Parameter names follow
// HF: q_a_proj, q_a_layernorm, q_b_proj (or q_proj when q_lora_rank is null),
// kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj.
//
//   q            = q_b_proj(rms(q_a_proj(x)))  or q_proj(x)          (T, H, nope + rope)
//   [c, k_rope]  = kv_a_proj_with_mqa(x);  c = kv_a_layernorm(c)      (T, kv_lora_rank), (T, rope)
//   q_rope, k_rope = RoPE(q_rope, k_rope)   (interleaved pairs when rope_interleave; one
//                                            k_rope shared by all heads)
//   [k_nope, v]  = kv_b_proj(c)                                        (T, H, nope + v_head_dim)
//   o            = softmax(scale · [q_nope, q_rope]·[k_nope, k_rope]ᵀ) v,  o_proj(o)
//   scale        = (nope + rope)^-0.5 · mscale(factor, mscale_all_dim)²  (YaRN, rope_yarn.h)
//
// One arithmetic for trainer and generator: both expand the latent through kv_b_proj
// (no absorbed-weight form). The generator caches only c and the rotated k_rope
// ((kv_lora_rank + rope) floats per token and layer) and recomputes k_nope and v from the
// cached latent for every step, through the same row-invariant kv_b_proj GEMM, so the
// keys and values it attends over are the trainer's bit for bit. The cost of the choice
// (kv_b_proj over the whole context per decode step) is measured in bench/mla_bench.cpp
// and docs/benchmarks.md.
#pragma once
#include <memory>

#include "titan/models/common/layer_spec.h"
#include "titan/models/common/layers.h"

namespace titan::models {

class MultiHeadLatentAttention : public Mixer {
 public:
  // rope: the decoder's fp32 tables over cfg.qk_rope_head_dim dims (plain, llama3 or
  // YaRN scaled; build_rope_tables).
  MultiHeadLatentAttention(const TransformerConfig& cfg, int layer_id, std::shared_ptr<const RopeCache> rope);
  // x (T, D) f32 -> (T, D). Trainer path (batch.kv null): packed varlen causal attention,
  // differentiable. Generator path: writes c and k_rope to cache->paged {latent,
  // k_rope}, then per sequence expands its cached latent (positions 0 .. its last query)
  // and attends through the paged attention kernel. Throws titan::Error on the generator
  // path without this layer's cache or with autograd recording.
  Tensor forward(const Tensor& x, const ForwardBatch& batch, LayerCache* cache) const override;
  // Paged: latent (B, kv_lora_rank) and k_rope (B, qk_rope_head_dim) per block.
  LayerCacheSpec cache_spec(int block_size) const override;
  // Projections: in_proj role, o_proj: out_proj role; norms 1.
  void init_weights(const nn::InitContext& ctx) override;
  void repack_for_decode() override;
  // The softmax scale (see above).
  double softmax_scale() const { return scale_; }
  // Component overrides (models/common/overrides.h): the composed reference attention
  // instead of the flash kernel (trainer path; not a dsa layer's core), the composed
  // RoPE (composed::apply_rotary, the same bits) instead of the fused kernel on q_rope
  // and k_rope (both paths, dsa included).
  bool reference_attention = false, composed_rope = false;

  Linear *q_proj = nullptr, *q_a_proj = nullptr, *q_b_proj = nullptr;
  RMSNorm* q_a_layernorm = nullptr;
  Linear *kv_a_proj_with_mqa, *kv_b_proj, *o_proj;
  RMSNorm* kv_a_layernorm;

 protected:
  // This layer's projections of x (T, D): the q latent q_resid = q_a_layernorm(q_a_proj(x))
  // (T, q_lora_rank; undefined with q_proj), q_nope (T, H, nope), the rotated q_rope
  // (T, H, rope), the normed latent c (T, kv_lora_rank) and the rotated k_rope (T, 1, rope).
  struct Projected {
    Tensor q_resid, q_nope, q_rope, c, k_rope;
  };
  Projected project(const Tensor& x, const ForwardBatch& batch) const;

  // q (T, H, nope), q_rope (T, H, rope), kv (T, H, nope + v), k_rope (T, 1, rope) ->
  // q, k, v (T, H, Dp), zero-padded to the kernels' head dim Dp (q/k when nope + rope <
  // Dp, v when v_head_dim < Dp; zero dims add exact zeros to every dot product).
  void assemble(const Tensor* q_nope, const Tensor* q_rope, const Tensor& kv, const Tensor& k_rope, Tensor* q,
                Tensor* k, Tensor* v) const;
  Tensor paged_attention(const Tensor& q, const Tensor& c, const Tensor& k_rope, const ForwardBatch& batch,
                         LayerCache& cache) const;

  std::shared_ptr<const RopeCache> rope_;
  int layer_id_;
  int64_t H_, nope_, rope_dim_, vd_, kvr_, Dp_;
  double scale_;
  bool interleave_;
};

}  // namespace titan::models
