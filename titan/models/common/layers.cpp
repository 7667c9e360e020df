#include "titan/models/common/layers.h"

#include <cmath>

#include "titan/autograd/node.h"
#include "titan/kernels/cpu/attention.h"
#include "titan/ops/activation.h"
#include "titan/ops/attention.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/index.h"
#include "titan/ops/matmul.h"
#include "titan/ops/norm.h"
#include "titan/ops/rope.h"

namespace titan::models {

namespace kc = titan::kernels::cpu;

Linear::Linear(int64_t in, int64_t out, bool has_bias) : out_features_(out) {
  weight = register_parameter("weight", Tensor::zeros({out, in}));
  if (has_bias) bias = register_parameter("bias", Tensor::zeros({out}));
}

void PanelRepackable::repack_for_decode() {
  if (repacked_) return;
  weight = repack_linear_weight(weight);
  replace_parameter("weight", weight);
  repacked_ = true;
}

Tensor Linear::forward(const Tensor& x) const {
  return repacked() ? linear_panels(x, weight, out_features_, bias) : linear(x, weight, bias);
}

Embedding::Embedding(int64_t num, int64_t dim) : num_(num) {
  weight = register_parameter("weight", Tensor::zeros({num, dim}));
}

Tensor Embedding::forward(const Tensor& ids) const {
  return repacked() ? embedding_panels(weight, num_, ids) : embedding(weight, ids);
}

RMSNorm::RMSNorm(int64_t dim, double eps_) : eps(eps_) {
  weight = register_parameter("weight", Tensor::ones({dim}));
}

Tensor RMSNorm::forward(const Tensor& x) const { return rms_norm(x, weight, eps); }

RopeCache build_rope_tables(const TransformerConfig& cfg) {
  titan::RopeScaling sc;
  if (cfg.rope_scaling.factor > 0) {
    sc.kind = titan::RopeScaling::Kind::llama3;
    sc.factor = cfg.rope_scaling.factor;
    sc.low_freq_factor = cfg.rope_scaling.low_freq_factor;
    sc.high_freq_factor = cfg.rope_scaling.high_freq_factor;
    sc.original_max_position_embeddings = cfg.rope_scaling.original_max_position_embeddings;
  }
  return rope_cache(cfg.max_position_embeddings, cfg.head_dim, cfg.rope_theta, sc);
}

Attention::Attention(const TransformerConfig& cfg, int layer_id)
    : layer_id_(layer_id),
      H_(cfg.num_attention_heads),
      Hkv_(cfg.num_key_value_heads),
      Dh_(cfg.head_dim),
      window_(cfg.sliding_window) {
  const int64_t D = cfg.hidden_size;
  wq = register_module("wq", std::make_unique<Linear>(D, H_ * Dh_, cfg.attention_bias));
  wk = register_module("wk", std::make_unique<Linear>(D, Hkv_ * Dh_, cfg.attention_bias));
  wv = register_module("wv", std::make_unique<Linear>(D, Hkv_ * Dh_, cfg.attention_bias));
  wo = register_module("wo", std::make_unique<Linear>(H_ * Dh_, D, false));
  if (cfg.qk_norm) {
    q_norm = register_module("q_norm", std::make_unique<RMSNorm>(Dh_, cfg.rms_norm_eps));
    k_norm = register_module("k_norm", std::make_unique<RMSNorm>(Dh_, cfg.rms_norm_eps));
  }
}

Tensor Attention::forward(const Tensor& x, const ForwardBatch& batch, const RopeCache& rope) const {
  const int64_t T = x.size(0);
  Tensor q = wq->forward(x).view({T, H_, Dh_});
  Tensor k = wk->forward(x).view({T, Hkv_, Dh_});
  Tensor v = wv->forward(x).view({T, Hkv_, Dh_});
  if (q_norm) {
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }
  std::tie(q, k) = apply_rotary(q, k, batch.positions, rope);
  Tensor out;
  if (!batch.is_paged()) {
    AttentionOptions opts;
    opts.window = static_cast<int>(window_);
    opts.block_size = batch.attn_block_size;
    out = scaled_dot_product_attention_varlen(q, k, v, batch.cu_seqlens, opts);
  } else {
    kc::AttentionParams params;
    params.window = static_cast<int>(window_);
    // Generator: no autograd. Write this chunk's K/V into the pages, then attend.
    TITAN_CHECK(!autograd::GradMode::enabled() || !x.requires_grad(),
                "Attention: the paged-KV path runs without autograd (use NoGradGuard)");
    PagedKVCache& kv = *batch.kv;
    params.block_size = kv.block_size;
    Tensor kc_ = k.contiguous(), vc_ = v.contiguous(), qc = q.contiguous();
    kc::kv_cache_write(kv.k[layer_id_].data<float>(), kv.v[layer_id_].data<float>(),
                       kc_.data<float>(), vc_.data<float>(), batch.slot_mapping.data<int64_t>(), T,
                       static_cast<int>(Hkv_), static_cast<int>(Dh_), kv.num_blocks, kv.block_size);
    out = Tensor::empty({T, H_, Dh_});
    kc::attention_paged_fwd(out.data<float>(), nullptr, qc.data<float>(), kv.k[layer_id_].data<float>(),
                            kv.v[layer_id_].data<float>(), batch.block_tables.data<int32_t>(),
                            batch.seq_ids.data<int32_t>(), batch.positions.data<int32_t>(), T,
                            static_cast<int>(H_), static_cast<int>(Hkv_), static_cast<int>(Dh_),
                            static_cast<int>(batch.block_tables.size(0)),
                            static_cast<int>(batch.block_tables.size(1)), kv.num_blocks, params);
  }
  return wo->forward(out.view({T, H_ * Dh_}));
}

FeedForward::FeedForward(int64_t dim, int64_t hidden) {
  w1 = register_module("w1", std::make_unique<Linear>(dim, hidden, false));
  w2 = register_module("w2", std::make_unique<Linear>(hidden, dim, false));
  w3 = register_module("w3", std::make_unique<Linear>(dim, hidden, false));
}

Tensor FeedForward::forward(const Tensor& x) const {
  return w2->forward(swiglu(w1->forward(x), w3->forward(x)));
}

TransformerBlock::TransformerBlock(const TransformerConfig& cfg, int layer_id) {
  attention = register_module("attention", std::make_unique<Attention>(cfg, layer_id));
  feed_forward = register_module(
      "feed_forward", std::make_unique<FeedForward>(cfg.hidden_size, cfg.intermediate_size));
  attention_norm = register_module("attention_norm", std::make_unique<RMSNorm>(cfg.hidden_size, cfg.rms_norm_eps));
  ffn_norm = register_module("ffn_norm", std::make_unique<RMSNorm>(cfg.hidden_size, cfg.rms_norm_eps));
}

Tensor TransformerBlock::forward(const Tensor& x, const ForwardBatch& batch, const RopeCache& rope) const {
  Tensor h = add(x, attention->forward(attention_norm->forward(x), batch, rope));
  return add(h, feed_forward->forward(ffn_norm->forward(h)));
}

}  // namespace titan::models
