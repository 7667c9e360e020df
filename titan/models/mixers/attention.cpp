#include "titan/models/mixers/attention.h"
#include "titan/models/mixers/context_parallel_attention.h"

#include <cmath>
#include <vector>

#include "titan/models/common/overrides.h"

#include "titan/autograd/node.h"
#include "titan/kernels/cpu/attention.h"
#include "titan/ops/attention.h"
#include "titan/ops/bf16_compute.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/norm.h"
#include "titan/ops/rope.h"

namespace titan::models {

namespace kc = titan::kernels::cpu;

namespace {
thread_local const ContextParallelAttention* t_context_parallel = nullptr;
}  // namespace

const ContextParallelAttention* context_parallel_attention() { return t_context_parallel; }
ContextParallelScope::ContextParallelScope(const ContextParallelAttention* cp) : prev_(t_context_parallel) {
  t_context_parallel = cp;
}
ContextParallelScope::~ContextParallelScope() { t_context_parallel = prev_; }

Attention::Attention(const TransformerConfig& cfg, const LayerSpec& spec, int layer_id,
                     std::shared_ptr<const RopeCache> rope)
    : rope_(std::move(rope)),
      layer_id_(layer_id),
      H_(cfg.num_attention_heads),
      Hkv_(cfg.num_key_value_heads),
      Dh_(cfg.head_dim),
      window_(spec.window),
      chunk_(spec.chunk),
      use_rope_(spec.use_rope),
      rope_style_(cfg.rope_interleave_gqa ? RopeStyle::interleaved : RopeStyle::rotate_half),
      qk_l2_eps_(cfg.use_qk_norm && spec.use_rope ? cfg.rms_norm_eps : -1.0),
      gate_(cfg.attn_output_gate),
      scale_(cfg.query_pre_attn_scalar > 0 ? 1.0 / std::sqrt(cfg.query_pre_attn_scalar) : 0.0),
      softcap_(cfg.attn_logit_softcapping),
      temperature_tuning_(cfg.attn_temperature_tuning && !spec.use_rope),
      floor_scale_(cfg.floor_scale),
      attn_scale_(cfg.attn_scale) {
  const int64_t D = cfg.hidden_size;
  // With the output gate (Qwen3-Next) wq yields, per head, Dh query dims then Dh gate dims.
  wq = register_module("wq", std::make_unique<Linear>(D, H_ * Dh_ * (gate_ ? 2 : 1), cfg.attention_bias));
  wk = register_module("wk", std::make_unique<Linear>(D, Hkv_ * Dh_, cfg.attention_bias));
  wv = register_module("wv", std::make_unique<Linear>(D, Hkv_ * Dh_, cfg.attention_bias));
  wo = register_module("wo", std::make_unique<Linear>(H_ * Dh_, D, cfg.attention_bias));
  if (cfg.qk_norm) {
    q_norm = register_module("q_norm", std::make_unique<RMSNorm>(Dh_, cfg.rms_norm_eps, cfg.norm_unit_offset));
    k_norm = register_module("k_norm", std::make_unique<RMSNorm>(Dh_, cfg.rms_norm_eps, cfg.norm_unit_offset));
  }
  if (cfg.attention_sinks) sinks = register_parameter("sinks", Tensor::zeros({H_}));
}

namespace {
// Llama 4 attention temperature tuning (HF Llama4TextAttention): per token, the query
// multiplier 1 + attn_scale * log1p(floor((p + 1) / floor_scale)), computed in double
// from the position and rounded once; (T, 1, 1) f32.
Tensor temperature_scales(const Tensor& positions, double floor_scale, double attn_scale) {
  const int64_t T = positions.numel();
  const int32_t* p = positions.data<int32_t>();
  std::vector<float> s(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t)
    s[static_cast<size_t>(t)] = static_cast<float>(
        1.0 + attn_scale * std::log1p(std::floor((static_cast<double>(p[t]) + 1.0) / floor_scale)));
  return Tensor::from_vector(s, {T, 1, 1});
}
}  // namespace

Tensor Attention::forward(const Tensor& x, const ForwardBatch& batch, LayerCache* cache) const {
  const int64_t T = x.size(0);
  Tensor q, gate;
  if (gate_) {
    Tensor qg = wq->forward(x).view({T, H_, 2 * Dh_});
    q = qg.narrow(2, 0, Dh_).contiguous();
    gate = qg.narrow(2, Dh_, Dh_).contiguous().view({T, H_ * Dh_});
  } else {
    q = wq->forward(x).view({T, H_, Dh_});
  }
  Tensor k = wk->forward(x).view({T, Hkv_, Dh_});
  Tensor v = wv->forward(x).view({T, Hkv_, Dh_});
  if (q_norm) {
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }
  if (use_rope_ && composed_rope) {
    count_override_call("rope", "composed");
    q = composed::apply_rotary(q, batch.positions, *rope_, rope_style_);
    k = composed::apply_rotary(k, batch.positions, *rope_, rope_style_);
  } else if (use_rope_) {
    std::tie(q, k) = apply_rotary(q, k, batch.positions, *rope_, rope_style_);
  }
  if (qk_l2_eps_ >= 0) {
    q = rms_norm(q, Tensor(), qk_l2_eps_);
    k = rms_norm(k, Tensor(), qk_l2_eps_);
  }
  if (temperature_tuning_)
    q = mul(q, temperature_scales(batch.positions, floor_scale_, attn_scale_).expand({T, H_, Dh_}));
  // bf16 compute: bf16 Q/K/V (and output); scores, softmax and P·V stay fp32.
  const bool bf16 = bf16_compute();
  if (bf16) {
    q = round_bf16(q);
    k = round_bf16(k);
    v = round_bf16(v);
  }
  Tensor out;
  if (!batch.is_paged()) {
    AttentionOptions opts;
    opts.window = static_cast<int>(window_);
    opts.chunk = static_cast<int>(chunk_);
    opts.scale = scale_;
    opts.softcap = softcap_;
    opts.sinks = sinks;
    opts.block_size = batch.attn_block_size;
    const ContextParallelAttention* cp = context_parallel_attention();
    if (cp) {
      out = cp->attention(q.contiguous(), k.contiguous(), v.contiguous(), opts);
    } else if (reference_attention) {
      count_override_call("attention", "reference");
      out = composed::scaled_dot_product_attention_varlen(q, k, v, batch.cu_seqlens, opts);
    } else {
      out = scaled_dot_product_attention_varlen(q, k, v, batch.cu_seqlens, opts);
    }
  } else {
    kc::AttentionParams params;
    params.window = static_cast<int>(window_);
    params.chunk = static_cast<int>(chunk_);
    params.scale = static_cast<float>(scale_);
    params.softcap = static_cast<float>(softcap_);
    Tensor sinks_c = sinks.defined() ? sinks.contiguous() : Tensor();
    params.sinks = sinks_c.defined() ? sinks_c.data<float>() : nullptr;
    // Generator: no autograd. Write this chunk's K/V into the pages, then attend.
    TITAN_CHECK(!autograd::GradMode::enabled() || !x.requires_grad(),
                "Attention: the paged-KV path runs without autograd (use NoGradGuard)");
    TITAN_CHECK(cache != nullptr && cache->paged.size() == 2,
                "Attention (layer {}): the generator path needs the layer's K/V cache", layer_id_);
    const ModelCache& kv = *batch.kv;
    float* kc_pages = cache->paged[0].data<float>();
    float* vc_pages = cache->paged[1].data<float>();
    params.block_size = kv.block_size;
    Tensor kc_ = k.contiguous(), vc_ = v.contiguous(), qc = q.contiguous();
    kc::kv_cache_write(kc_pages, vc_pages,
                       kc_.data<float>(), vc_.data<float>(), batch.slot_mapping.data<int64_t>(), T,
                       static_cast<int>(Hkv_), static_cast<int>(Dh_), kv.num_blocks, kv.block_size);
    out = Tensor::empty({T, H_, Dh_});
    kc::attention_paged_fwd(out.data<float>(), nullptr, qc.data<float>(), kc_pages,
                            vc_pages, batch.block_tables.data<int32_t>(),
                            batch.seq_ids.data<int32_t>(), batch.positions.data<int32_t>(), T,
                            static_cast<int>(H_), static_cast<int>(Hkv_), static_cast<int>(Dh_),
                            static_cast<int>(batch.block_tables.size(0)),
                            static_cast<int>(batch.block_tables.size(1)), kv.num_blocks, params);
  }
  if (bf16) out = round_bf16(out);
  Tensor o = out.view({T, H_ * Dh_});
  if (gate_) o = mul(o, sigmoid(gate));
  return wo->forward(o);
}

LayerCacheSpec Attention::cache_spec(int block_size) const {
  const int64_t B = block_size;
  LayerCacheSpec s;
  s.paged.push_back({"k", {Hkv_, Dh_, B}});
  s.paged.push_back({"v", {Hkv_, B, Dh_}});
  return s;
}

void Attention::init_weights(const nn::InitContext& ctx) {
  for (Linear* l : {wq, wk, wv}) l->init(ctx, nn::InitRole::in_proj, layer_id_);
  wo->init(ctx, nn::InitRole::out_proj, layer_id_);
  if (q_norm) {
    q_norm->init_weights(ctx);
    k_norm->init_weights(ctx);
  }
  if (sinks.defined()) nn::InitContext::constant(sinks, 0.0);
}

void Attention::repack_for_decode() {
  for (Linear* l : {wq, wk, wv, wo}) l->repack_for_decode();
}

}  // namespace titan::models
