#include "titan/models/common/block.h"

#include "titan/models/ffn/moe.h"
#include "titan/models/mixers/dsa.h"
#include "titan/nn/hooks.h"
#include "titan/ops/elementwise.h"

namespace titan::models {

TransformerBlock::TransformerBlock(const TransformerConfig& cfg, const LayerSpec& spec_, int layer_id,
                                   std::shared_ptr<const RopeCache> rope)
    : spec(spec_) {
  switch (spec.mixer) {
    case MixerKind::gqa:
      attention = register_module("attention", std::make_unique<Attention>(cfg, spec, layer_id, std::move(rope)));
      mixer = attention;
      break;
    case MixerKind::gdn:
      gdn = register_module("attention", std::make_unique<GatedDeltaNet>(cfg, layer_id));
      mixer = gdn;
      break;
    case MixerKind::mla:
      mla = register_module("attention", std::make_unique<MultiHeadLatentAttention>(cfg, layer_id, std::move(rope)));
      mixer = mla;
      break;
    case MixerKind::dsa:  // an MLA layer whose attention visits the indexer's top-k keys
      mla = register_module("attention", std::make_unique<DeepSeekSparseAttention>(cfg, layer_id, std::move(rope)));
      mixer = mla;
      break;
    case MixerKind::kda:
      kda = register_module("attention", std::make_unique<KimiDeltaAttention>(cfg, layer_id));
      mixer = kda;
      break;
  }
  switch (spec.ffn) {
    case FfnKind::dense:
      feed_forward = register_module(
          "feed_forward", std::make_unique<FeedForward>(cfg.hidden_size, cfg.intermediate_size, layer_id,
                                                        cfg.hidden_act == "gelu_pytorch_tanh"));
      ffn = feed_forward;
      break;
    case FfnKind::moe:
      moe = register_module("moe", std::make_unique<MoE>(cfg, layer_id));
      ffn = moe;
      break;
  }
  auto make_norm = [&] { return std::make_unique<RMSNorm>(cfg.hidden_size, cfg.rms_norm_eps, cfg.norm_unit_offset); };
  if (cfg.pre_norms) {
    attention_norm = register_module("attention_norm", make_norm());
    ffn_norm = register_module("ffn_norm", make_norm());
  }
  if (cfg.post_norms) {
    attention_post_norm = register_module("attention_post_norm", make_norm());
    ffn_post_norm = register_module("ffn_post_norm", make_norm());
  }
}

namespace {
// norm(x) through nn::call_forward, or x when the norm is absent.
Tensor apply_norm(const RMSNorm* norm, const Tensor& x) {
  if (!norm) return x;
  return nn::call_forward(*norm, [&] { return norm->forward(x); });
}
}  // namespace

Tensor TransformerBlock::forward(const Tensor& x, const ForwardBatch& batch, LayerCache* cache) const {
  // Each part runs through nn::call_forward, so that a hook can act on its output
  // (tensor parallelism: titan/distributed/tensor_parallel.h).
  Tensor a = apply_norm(attention_norm, x);
  Tensor h = add(x, apply_norm(attention_post_norm,
                               nn::call_forward(*mixer, [&] { return mixer->forward(a, batch, cache); })));
  Tensor f = apply_norm(ffn_norm, h);
  return add(h, apply_norm(ffn_post_norm, nn::call_forward(*ffn, [&] { return ffn->forward(f, batch, cache); })));
}

LayerCacheSpec TransformerBlock::cache_spec(int block_size) const {
  LayerCacheSpec s = mixer->cache_spec(block_size);
  LayerCacheSpec f = ffn->cache_spec(block_size);
  s.paged.insert(s.paged.end(), f.paged.begin(), f.paged.end());
  s.state.insert(s.state.end(), f.state.begin(), f.state.end());
  return s;
}

void TransformerBlock::repack_for_decode() {
  mixer->repack_for_decode();
  ffn->repack_for_decode();
}

}  // namespace titan::models
