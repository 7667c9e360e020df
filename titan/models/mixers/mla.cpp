#include "titan/models/mixers/mla.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "titan/autograd/node.h"
#include "titan/kernels/cpu/attention.h"
#include "titan/models/common/overrides.h"
#include "titan/models/common/rope_yarn.h"
#include "titan/ops/attention.h"
#include "titan/ops/join.h"
#include "titan/ops/rope.h"

namespace titan::models {

namespace kc = titan::kernels::cpu;

MultiHeadLatentAttention::MultiHeadLatentAttention(const TransformerConfig& cfg, int layer_id,
                                                   std::shared_ptr<const RopeCache> rope)
    : rope_(std::move(rope)),
      layer_id_(layer_id),
      H_(cfg.num_attention_heads),
      nope_(cfg.qk_nope_head_dim),
      rope_dim_(cfg.qk_rope_head_dim),
      vd_(cfg.v_head_dim),
      kvr_(cfg.kv_lora_rank),
      interleave_(cfg.rope_interleave) {
  const int64_t D = cfg.hidden_size, qk = nope_ + rope_dim_;
  Dp_ = (std::max(qk, vd_) + 7) / 8 * 8;
  scale_ = 1.0 / std::sqrt(static_cast<double>(qk));
  if (cfg.rope_scaling.factor > 0 && cfg.rope_scaling.rope_type == "yarn")
    scale_ *= yarn_softmax_scale_factor(cfg.rope_scaling);
  if (cfg.q_lora_rank > 0) {
    q_a_proj = register_module("q_a_proj", std::make_unique<Linear>(D, cfg.q_lora_rank, cfg.attention_bias));
    q_a_layernorm = register_module("q_a_layernorm", std::make_unique<RMSNorm>(cfg.q_lora_rank, cfg.rms_norm_eps));
    q_b_proj = register_module("q_b_proj", std::make_unique<Linear>(cfg.q_lora_rank, H_ * qk, false));
  } else {
    q_proj = register_module("q_proj", std::make_unique<Linear>(D, H_ * qk, false));
  }
  kv_a_proj_with_mqa =
      register_module("kv_a_proj_with_mqa", std::make_unique<Linear>(D, kvr_ + rope_dim_, cfg.attention_bias));
  kv_a_layernorm = register_module("kv_a_layernorm", std::make_unique<RMSNorm>(kvr_, cfg.rms_norm_eps));
  kv_b_proj = register_module("kv_b_proj", std::make_unique<Linear>(kvr_, H_ * (nope_ + vd_), false));
  o_proj = register_module("o_proj", std::make_unique<Linear>(H_ * vd_, D, cfg.attention_bias));
}

void MultiHeadLatentAttention::assemble(const Tensor* q_nope, const Tensor* q_rope, const Tensor& kv,
                                        const Tensor& k_rope, Tensor* q, Tensor* k, Tensor* v) const {
  const int64_t T = kv.size(0), qk = nope_ + rope_dim_;
  const Tensor k_nope = kv.narrow(2, 0, nope_);
  const Tensor kr = k_rope.expand({T, H_, rope_dim_});
  if (qk < Dp_) {
    const Tensor zq = Tensor::zeros({T, H_, Dp_ - qk});
    if (q) *q = cat({*q_nope, *q_rope, zq}, 2);
    *k = cat({k_nope, kr, zq}, 2);
  } else {
    if (q) *q = cat({*q_nope, *q_rope}, 2);
    *k = cat({k_nope, kr}, 2);
  }
  const Tensor vv = kv.narrow(2, nope_, vd_);
  *v = vd_ < Dp_ ? cat({vv, Tensor::zeros({T, H_, Dp_ - vd_})}, 2) : vv.contiguous();
}

MultiHeadLatentAttention::Projected MultiHeadLatentAttention::project(const Tensor& x,
                                                                     const ForwardBatch& batch) const {
  const int64_t T = x.size(0), qk = nope_ + rope_dim_;
  Projected p;
  if (!q_proj) p.q_resid = q_a_layernorm->forward(q_a_proj->forward(x));
  Tensor q = (q_proj ? q_proj->forward(x) : q_b_proj->forward(p.q_resid)).view({T, H_, qk});
  p.q_nope = q.narrow(2, 0, nope_);
  Tensor q_rope = q.narrow(2, nope_, rope_dim_).contiguous();
  Tensor ckv = kv_a_proj_with_mqa->forward(x);
  p.c = kv_a_layernorm->forward(ckv.narrow(1, 0, kvr_).contiguous());
  Tensor k_rope = ckv.narrow(1, kvr_, rope_dim_).contiguous().view({T, 1, rope_dim_});
  const RopeStyle style = interleave_ ? RopeStyle::interleaved : RopeStyle::rotate_half;
  if (composed_rope) {
    count_override_call("rope", "composed");
    p.q_rope = composed::apply_rotary(q_rope, batch.positions, *rope_, style);
    p.k_rope = composed::apply_rotary(k_rope, batch.positions, *rope_, style);
  } else {
    std::tie(p.q_rope, p.k_rope) = apply_rotary(q_rope, k_rope, batch.positions, *rope_, style);
  }
  return p;
}

Tensor MultiHeadLatentAttention::forward(const Tensor& x, const ForwardBatch& batch, LayerCache* cache) const {
  const int64_t T = x.size(0), qk = nope_ + rope_dim_;
  Projected pr = project(x, batch);
  Tensor &q_nope = pr.q_nope, &q_rope = pr.q_rope, &c = pr.c, &k_rope = pr.k_rope;
  Tensor out;  // (T, H, Dp)
  if (!batch.is_paged()) {
    Tensor qq, kk, vv;
    assemble(&q_nope, &q_rope, kv_b_proj->forward(c).view({T, H_, nope_ + vd_}), k_rope, &qq, &kk, &vv);
    AttentionOptions opts;
    opts.scale = scale_;
    opts.block_size = batch.attn_block_size;
    if (reference_attention) {
      count_override_call("attention", "reference");
      out = composed::scaled_dot_product_attention_varlen(qq, kk, vv, batch.cu_seqlens, opts);
    } else {
      out = scaled_dot_product_attention_varlen(qq, kk, vv, batch.cu_seqlens, opts);
    }
  } else {
    TITAN_CHECK(!autograd::GradMode::enabled() || !x.requires_grad(),
                "MultiHeadLatentAttention: the paged-cache path runs without autograd (use NoGradGuard)");
    TITAN_CHECK(cache != nullptr && cache->paged.size() == 2,
                "MultiHeadLatentAttention (layer {}): the generator path needs the layer's latent cache", layer_id_);
    Tensor qq = qk < Dp_ ? cat({q_nope, q_rope, Tensor::zeros({T, H_, Dp_ - qk})}, 2) : cat({q_nope, q_rope}, 2);
    out = paged_attention(qq, c, k_rope, batch, *cache);
  }
  Tensor o = out.narrow(2, 0, vd_).contiguous().view({T, H_ * vd_});
  return o_proj->forward(o);
}

Tensor MultiHeadLatentAttention::paged_attention(const Tensor& q, const Tensor& c, const Tensor& k_rope,
                                                 const ForwardBatch& batch, LayerCache& cache) const {
  const int64_t T = q.size(0);
  const ModelCache& mc = *batch.kv;
  const int64_t B = mc.block_size, NB = mc.num_blocks;
  float* lat = cache.paged[0].data<float>();
  float* kr_pages = cache.paged[1].data<float>();
  const Tensor cc = c.contiguous(), krc = k_rope.contiguous();
  const float* cp = cc.data<float>();
  const float* krp = krc.data<float>();
  const int64_t* slots = batch.slot_mapping.data<int64_t>();
  // 1. This chunk's latent and rotated RoPE key into the pages.
  for (int64_t t = 0; t < T; ++t) {
    const int64_t s = slots[t];
    if (s < 0) continue;
    TITAN_CHECK(s < NB * B, "MultiHeadLatentAttention: slot_mapping[{}] = {} is outside the cache ({} slots)", t, s,
                NB * B);
    std::memcpy(lat + s * kvr_, cp + t * kvr_, sizeof(float) * static_cast<size_t>(kvr_));
    std::memcpy(kr_pages + s * rope_dim_, krp + t * rope_dim_, sizeof(float) * static_cast<size_t>(rope_dim_));
  }
  // 2. Per sequence: expand positions 0 .. its last query from the cache, attend.
  const int32_t* seq = batch.seq_ids.data<int32_t>();
  const int32_t* pos = batch.positions.data<int32_t>();
  const int32_t* bt = batch.block_tables.data<int32_t>();
  const int64_t max_blocks = batch.block_tables.size(1), num_seqs = batch.block_tables.size(0);
  std::map<int32_t, std::vector<int64_t>> tokens_of;  // sequence row -> its tokens in the batch
  for (int64_t t = 0; t < T; ++t) {
    TITAN_CHECK(seq[t] >= 0 && seq[t] < num_seqs, "MultiHeadLatentAttention: seq_ids[{}] = {} is outside [0, {})", t,
                seq[t], num_seqs);
    tokens_of[seq[t]].push_back(t);
  }
  Tensor out = Tensor::empty({T, H_, Dp_});
  const Tensor qc = q.contiguous();
  for (const auto& [s, toks] : tokens_of) {
    int64_t pmax = 0;
    for (int64_t t : toks) pmax = std::max<int64_t>(pmax, pos[t]);
    const int64_t P = pmax + 1, nblk = (P + B - 1) / B;
    TITAN_CHECK(nblk <= max_blocks, "MultiHeadLatentAttention: position {} needs {} blocks, the block table has {}",
                pmax, nblk, max_blocks);
    Tensor C = Tensor::empty({P, kvr_}), KR = Tensor::empty({P, 1, rope_dim_});
    float* Cp = C.data<float>();
    float* KRp = KR.data<float>();
    for (int64_t p = 0; p < P; ++p) {
      const int32_t blk = bt[s * max_blocks + p / B];
      TITAN_CHECK(blk >= 0 && blk < NB, "MultiHeadLatentAttention: block_tables[{}][{}] = {} is outside [0, {})", s,
                  p / B, blk, NB);
      const int64_t slot = static_cast<int64_t>(blk) * B + p % B;
      std::memcpy(Cp + p * kvr_, lat + slot * kvr_, sizeof(float) * static_cast<size_t>(kvr_));
      std::memcpy(KRp + p * rope_dim_, kr_pages + slot * rope_dim_, sizeof(float) * static_cast<size_t>(rope_dim_));
    }
    // Scratch pages of this sequence's expanded keys and values in the paged kernel's
    // layout (k (H, Dp, B), v (H, B, Dp) per block): k = [k_nope, k_rope, 0], v = [v, 0],
    // the values the trainer path concatenates (copies only, so the same bits).
    const Tensor kv = kv_b_proj->forward(C);  // (P, H · (nope + v))
    const float* kvp = kv.data<float>();
    Tensor kpages = Tensor::empty({nblk, H_, Dp_, B}), vpages = Tensor::empty({nblk, H_, B, Dp_});
    float* kpp = kpages.data<float>();
    float* vpp = vpages.data<float>();
    const int64_t qk = nope_ + rope_dim_, w = nope_ + vd_;
    // Per token and head: k's nope, rope and zero ranges (strided by B) and v's row, as
    // straight loops and copies (the decode step's largest cost after kv_b_proj).
    const size_t vbytes = sizeof(float) * static_cast<size_t>(vd_), vpad = sizeof(float) * static_cast<size_t>(Dp_ - vd_);
    for (int64_t p = 0; p < nblk * B; ++p) {
      const int64_t blk = p / B, off = p % B;
      const float* kr = KRp + p * rope_dim_;
      for (int64_t h = 0; h < H_; ++h) {
        float* kd = kpp + ((blk * H_ + h) * Dp_) * B + off;
        float* vd = vpp + ((blk * H_ + h) * B + off) * Dp_;
        if (p >= P) {
          for (int64_t d = 0; d < Dp_; ++d) kd[d * B] = 0.0f;
          std::memset(vd, 0, sizeof(float) * static_cast<size_t>(Dp_));
          continue;
        }
        const float* src = kvp + (p * H_ + h) * w;
        for (int64_t d = 0; d < nope_; ++d) kd[d * B] = src[d];
        for (int64_t d = nope_; d < qk; ++d) kd[d * B] = kr[d - nope_];
        for (int64_t d = qk; d < Dp_; ++d) kd[d * B] = 0.0f;
        std::memcpy(vd, src + nope_, vbytes);
        if (vpad) std::memset(vd + vd_, 0, vpad);
      }
    }
    const int64_t n = static_cast<int64_t>(toks.size());
    Tensor qs = Tensor::empty({n, H_, Dp_}), os = Tensor::empty({n, H_, Dp_});
    std::vector<int32_t> table(static_cast<size_t>(nblk)), seq0(static_cast<size_t>(n), 0), ps(static_cast<size_t>(n));
    for (int64_t b = 0; b < nblk; ++b) table[static_cast<size_t>(b)] = static_cast<int32_t>(b);
    const size_t row = static_cast<size_t>(H_ * Dp_);
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(qs.data<float>() + i * H_ * Dp_, qc.data<float>() + toks[static_cast<size_t>(i)] * H_ * Dp_,
                  sizeof(float) * row);
      ps[static_cast<size_t>(i)] = pos[toks[static_cast<size_t>(i)]];
    }
    kc::AttentionParams params;
    params.scale = static_cast<float>(scale_);
    params.block_size = static_cast<int>(B);
    kc::attention_paged_fwd(os.data<float>(), nullptr, qs.data<float>(), kpages.data<float>(), vpages.data<float>(),
                            table.data(), seq0.data(), ps.data(), n, static_cast<int>(H_), static_cast<int>(H_),
                            static_cast<int>(Dp_), 1, static_cast<int>(nblk), nblk, params);
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(out.data<float>() + toks[static_cast<size_t>(i)] * H_ * Dp_, os.data<float>() + i * H_ * Dp_,
                  sizeof(float) * row);
  }
  return out;
}

LayerCacheSpec MultiHeadLatentAttention::cache_spec(int block_size) const {
  const int64_t B = block_size;
  LayerCacheSpec s;
  s.paged.push_back({"latent", {B, kvr_}});
  s.paged.push_back({"k_rope", {B, rope_dim_}});
  return s;
}

void MultiHeadLatentAttention::init_weights(const nn::InitContext& ctx) {
  for (Linear* l : {q_proj, q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj})
    if (l) l->init(ctx, nn::InitRole::in_proj, layer_id_);
  o_proj->init(ctx, nn::InitRole::out_proj, layer_id_);
  if (q_a_layernorm) q_a_layernorm->init_weights(ctx);
  kv_a_layernorm->init_weights(ctx);
}

void MultiHeadLatentAttention::repack_for_decode() {
  for (Linear* l : {q_proj, q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj})
    if (l) l->repack_for_decode();
}

}  // namespace titan::models
