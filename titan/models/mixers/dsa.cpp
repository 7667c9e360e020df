#include "titan/models/mixers/dsa.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <optional>

#include "titan/autograd/function.h"
#include "titan/autograd/node.h"
#include "titan/core/thread_pool.h"
#include "titan/models/mixers/dsa_indexer_loss.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/join.h"
#include "titan/ops/norm.h"
#include "titan/ops/rope.h"

namespace titan::models {

// ---- LayerNorm

LayerNorm::LayerNorm(int64_t dim, double eps_) : eps(eps_) {
  weight = register_parameter("weight", Tensor::ones({dim}));
  bias = register_parameter("bias", Tensor::zeros({dim}));
}

void LayerNorm::init_weights(const nn::InitContext&) {
  nn::InitContext::constant(weight, 1.0);
  nn::InitContext::constant(bias, 0.0);
}

Tensor LayerNorm::forward(const Tensor& x) const { return layer_norm(x, weight, bias, eps); }

// ---- the lightning indexer

LightningIndexer::LightningIndexer(const TransformerConfig& cfg, int layer_id, std::shared_ptr<const RopeCache> rope)
    : n_heads(cfg.index_n_heads),
      head_dim(cfg.index_head_dim),
      topk(cfg.index_topk),
      softmax_scale(static_cast<float>(1.0 / std::sqrt(static_cast<double>(cfg.index_head_dim)))),
      rope_(std::move(rope)),
      layer_id_(layer_id) {
  wq_b = register_module("wq_b", std::make_unique<Linear>(cfg.q_lora_rank, n_heads * head_dim, false));
  wk = register_module("wk", std::make_unique<Linear>(cfg.hidden_size, head_dim, false));
  k_norm = register_module("k_norm", std::make_unique<LayerNorm>(head_dim, 1e-6));
  weights_proj = register_module("weights_proj", std::make_unique<Linear>(cfg.hidden_size, n_heads, false));
}

Tensor LightningIndexer::queries(const Tensor& q_resid, const Tensor& positions) const {
  const int64_t T = q_resid.size(0);
  return apply_rotary(wq_b->forward(q_resid).view({T, n_heads, head_dim}), positions, *rope_, RopeStyle::rotate_half);
}

Tensor LightningIndexer::keys(const Tensor& x, const Tensor& positions) const {
  const int64_t T = x.size(0);
  Tensor k = k_norm->forward(wk->forward(x)).view({T, 1, head_dim});
  return apply_rotary(k, positions, *rope_, RopeStyle::rotate_half).view({T, head_dim});
}

Tensor LightningIndexer::head_weights(const Tensor& x) const {
  return mul(weights_proj->forward(x), 1.0 / std::sqrt(static_cast<double>(n_heads))).contiguous();
}

void LightningIndexer::init_weights(const nn::InitContext& ctx) {
  for (Linear* l : {wq_b, wk, weights_proj}) l->init(ctx, nn::InitRole::in_proj, layer_id_);
  k_norm->init_weights(ctx);
}

void LightningIndexer::repack_for_decode() {
  for (Linear* l : {wq_b, wk, weights_proj}) l->repack_for_decode();
}

// ---- kernels

int64_t dsa_select_topk(const float* q, const float* w, const float* keys, int64_t n, int64_t Hi, int64_t Di,
                        float scale, int64_t topk, int32_t* out) {
  if (n <= topk) {
    for (int64_t s = 0; s < n; ++s) out[s] = static_cast<int32_t>(s);
    return n;
  }
  std::vector<float> score(static_cast<size_t>(n));
  for (int64_t s = 0; s < n; ++s) {
    const float* k = keys + s * Di;
    float acc = 0.0f;
    for (int64_t h = 0; h < Hi; ++h) {
      const float* qh = q + h * Di;
      float d = 0.0f;
      for (int64_t e = 0; e < Di; ++e) d += qh[e] * k[e];
      d *= scale;
      if (d > 0.0f) acc += w[h] * d;
    }
    score[static_cast<size_t>(s)] = std::isnan(acc) ? -std::numeric_limits<float>::infinity() : acc;
  }
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  auto better = [&](int32_t a, int32_t b) {
    const float sa = score[static_cast<size_t>(a)], sb = score[static_cast<size_t>(b)];
    return sa > sb || (sa == sb && a < b);
  };
  std::nth_element(idx.begin(), idx.begin() + topk - 1, idx.end(), better);
  std::sort(idx.begin(), idx.begin() + topk);
  std::copy(idx.begin(), idx.begin() + topk, out);
  return topk;
}

namespace {

struct SparseDims {
  int64_t T, N, H, Dk, Dv, S;
};

SparseDims check_sparse(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& sel, const Tensor& count) {
  TITAN_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3,
              "dsa_sparse_attention: q, k, v must be 3-d (T, H, D), got {}, {}, {}", shape_str(q.shape()),
              shape_str(k.shape()), shape_str(v.shape()));
  TITAN_CHECK(q.dtype() == DType::f32 && k.dtype() == DType::f32 && v.dtype() == DType::f32,
              "dsa_sparse_attention: q, k, v must be f32");
  SparseDims d{q.size(0), k.size(0), q.size(1), q.size(2), v.size(2), sel.dim() == 2 ? sel.size(1) : 0};
  TITAN_CHECK(k.size(1) == d.H && v.size(1) == d.H && k.size(2) == d.Dk && v.size(0) == d.N,
              "dsa_sparse_attention: q {}, k {}, v {} do not agree", shape_str(q.shape()), shape_str(k.shape()),
              shape_str(v.shape()));
  TITAN_CHECK(sel.dim() == 2 && sel.size(0) == d.T && sel.dtype() == DType::i32 && count.dim() == 1 &&
                  count.size(0) == d.T && count.dtype() == DType::i32,
              "dsa_sparse_attention: sel must be (T = {}, S) i32 and count (T) i32, got {} and {}", d.T,
              shape_str(sel.shape()), shape_str(count.shape()));
  const int32_t* sp = sel.data<int32_t>();
  const int32_t* cp = count.data<int32_t>();
  for (int64_t t = 0; t < d.T; ++t) {
    TITAN_CHECK(cp[t] >= 1 && cp[t] <= d.S, "dsa_sparse_attention: count[{}] = {} is outside [1, {}]", t, cp[t], d.S);
    for (int64_t j = 0; j < cp[t]; ++j)
      TITAN_CHECK(sp[t * d.S + j] >= 0 && sp[t * d.S + j] < d.N,
                  "dsa_sparse_attention: sel[{}][{}] = {} is outside [0, {})", t, j, sp[t * d.S + j], d.N);
  }
  return d;
}

inline float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

Tensor dsa_sparse_attention(const Tensor& q_, const Tensor& k_, const Tensor& v_, const Tensor& sel_,
                            const Tensor& count_, double scale_d) {
  const Tensor q = q_.contiguous(), k = k_.contiguous(), v = v_.contiguous(), sel = sel_.contiguous(),
               count = count_.contiguous();
  const SparseDims d = check_sparse(q, k, v, sel, count);
  const float scale = static_cast<float>(scale_d);
  Tensor out = Tensor::empty({d.T, d.H, d.Dv}), mx = Tensor::empty({d.T, d.H}), sum = Tensor::empty({d.T, d.H});
  {
    const float *qp = q.data<float>(), *kp = k.data<float>(), *vp = v.data<float>();
    const int32_t *sp = sel.data<int32_t>(), *cp = count.data<int32_t>();
    float *op = out.data<float>(), *mp = mx.data<float>(), *lp = sum.data<float>();
    parallel_for(d.T * d.H, [&](int64_t begin, int64_t end) {
      std::vector<float> s(static_cast<size_t>(d.S));
      for (int64_t r = begin; r < end; ++r) {
        const int64_t t = r / d.H, h = r % d.H, n = cp[t];
        const float* qr = qp + r * d.Dk;
        const int32_t* st = sp + t * d.S;
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < n; ++j) {
          s[static_cast<size_t>(j)] = scale * dot(qr, kp + (st[j] * d.H + h) * d.Dk, d.Dk);
          m = std::max(m, s[static_cast<size_t>(j)]);
        }
        float* o = op + r * d.Dv;
        std::fill_n(o, d.Dv, 0.0f);
        float l = 0.0f;
        for (int64_t j = 0; j < n; ++j) {
          const float p = std::exp(s[static_cast<size_t>(j)] - m);
          l += p;
          const float* vr = vp + (st[j] * d.H + h) * d.Dv;
          for (int64_t e = 0; e < d.Dv; ++e) o[e] += p * vr[e];
        }
        for (int64_t e = 0; e < d.Dv; ++e) o[e] /= l;
        mp[r] = m;
        lp[r] = l;
      }
    });
  }
  if (autograd::needs_grad({&q_, &k_, &v_})) {
    autograd::record_fn(
        "DsaSparseAttention", {q_, k_, v_}, {out},
        [q = q.detach(), k = k.detach(), v = v.detach(), sel, count, o = out.detach(), mx, sum, d,
         scale](const std::vector<Tensor>& g) {
          const Tensor go = g[0].contiguous();
          Tensor dq = Tensor::zeros({d.T, d.H, d.Dk}), dk = Tensor::zeros({d.N, d.H, d.Dk}),
                 dv = Tensor::zeros({d.N, d.H, d.Dv});
          const float *qp = q.data<float>(), *kp = k.data<float>(), *vp = v.data<float>(), *op = o.data<float>(),
                      *gp = go.data<float>(), *mp = mx.data<float>(), *lp = sum.data<float>();
          const int32_t *sp = sel.data<int32_t>(), *cp = count.data<int32_t>();
          float *dqp = dq.data<float>(), *dkp = dk.data<float>(), *dvp = dv.data<float>();
          // One head per task: dk / dv rows of head h are written by that task alone, in
          // ascending t, so the sums do not depend on the thread count.
          parallel_for(d.H, [&](int64_t hb, int64_t he) {
            for (int64_t h = hb; h < he; ++h)
              for (int64_t t = 0; t < d.T; ++t) {
                const int64_t r = t * d.H + h, n = cp[t];
                const float *qr = qp + r * d.Dk, *gr = gp + r * d.Dv;
                const float Dt = dot(gr, op + r * d.Dv, d.Dv), m = mp[r], l = lp[r];
                float* dqr = dqp + r * d.Dk;
                const int32_t* st = sp + t * d.S;
                for (int64_t j = 0; j < n; ++j) {
                  const int64_t kr = st[j] * d.H + h;
                  const float* kj = kp + kr * d.Dk;
                  const float* vj = vp + kr * d.Dv;
                  const float p = std::exp(scale * dot(qr, kj, d.Dk) - m) / l;
                  const float ds = p * (dot(gr, vj, d.Dv) - Dt) * scale;
                  float* dkj = dkp + kr * d.Dk;
                  float* dvj = dvp + kr * d.Dv;
                  for (int64_t e = 0; e < d.Dk; ++e) {
                    dqr[e] += ds * kj[e];
                    dkj[e] += ds * qr[e];
                  }
                  for (int64_t e = 0; e < d.Dv; ++e) dvj[e] += p * gr[e];
                }
              }
          });
          return std::vector<Tensor>{dq, dk, dv};
        });
  }
  return out;
}

// ---- the mixer

DeepSeekSparseAttention::DeepSeekSparseAttention(const TransformerConfig& cfg, int layer_id,
                                                 std::shared_ptr<const RopeCache> rope)
    : MultiHeadLatentAttention(cfg, layer_id, rope) {
  TITAN_CHECK(cfg.is_dsa() && cfg.q_lora_rank > 0,
              "DeepSeekSparseAttention (layer {}): needs index_topk > 0 and q_lora_rank > 0", layer_id);
  indexer = register_module("indexer", std::make_unique<LightningIndexer>(cfg, layer_id, std::move(rope)));
  indexer_loss_coeff_ = cfg.indexer_loss_coeff;
  indexer_loss_sparse_ = cfg.indexer_loss_stage == "sparse";
}

IndexerLossStats DeepSeekSparseAttention::take_indexer_loss_stats() {
  const IndexerLossStats s = indexer_stats_;
  indexer_stats_ = {};
  return s;
}

Tensor DeepSeekSparseAttention::forward(const Tensor& x, const ForwardBatch& batch, LayerCache* cache) const {
  const int64_t T = x.size(0);
  const Projected p = project(x, batch);
  // The indexer loss: trainer path with autograd recording and indexer_loss_coeff > 0.
  const bool kl_loss = indexer_loss_coeff_ > 0 && !batch.is_paged() && autograd::GradMode::enabled() &&
                       x.requires_grad();
  Tensor qi, ki, wi;
  {
    // The indexer's inputs are detached: no gradient reaches the rest of the model through
    // it; its own parameters record only for the indexer loss (see dsa.h).
    std::optional<autograd::NoGradGuard> ng;
    if (!kl_loss) ng.emplace();
    qi = indexer->queries(p.q_resid.detach(), batch.positions).contiguous();
    ki = indexer->keys(x.detach(), batch.positions).contiguous();
    wi = indexer->head_weights(x.detach());
  }
  Tensor out;  // (T, H, v_head_dim)
  if (!batch.is_paged()) {
    const Tensor kv = kv_b_proj->forward(p.c).view({T, H_, nope_ + vd_});
    const Tensor q = cat({p.q_nope, p.q_rope}, 2);
    const Tensor k = cat({kv.narrow(2, 0, nope_), p.k_rope.expand({T, H_, rope_dim_})}, 2);
    const Tensor v = kv.narrow(2, nope_, vd_).contiguous();
    const int64_t S = std::min<int64_t>(indexer->topk, T);
    Tensor sel = Tensor::zeros({T, S}, DType::i32), count = Tensor::empty({T}, DType::i32);
    const Tensor cu = batch.cu_seqlens.contiguous();
    const int32_t* cup = cu.data<int32_t>();
    const int64_t nseq = cu.numel() - 1;
    TITAN_CHECK(nseq >= 1 && cup[0] == 0 && cup[nseq] == T,
                "DeepSeekSparseAttention: cu_seqlens must run from 0 to the {} tokens", T);
    std::vector<int32_t> start_of(static_cast<size_t>(T));
    for (int64_t s = 0; s < nseq; ++s)
      for (int32_t t = cup[s]; t < cup[s + 1]; ++t) start_of[static_cast<size_t>(t)] = cup[s];
    const float *qip = qi.data<float>(), *kip = ki.data<float>(), *wip = wi.data<float>();
    int32_t *selp = sel.data<int32_t>(), *cntp = count.data<int32_t>();
    const int64_t Hi = indexer->n_heads, Di = indexer->head_dim;
    parallel_for(T, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t s0 = start_of[static_cast<size_t>(t)];
        int32_t* row = selp + t * S;
        const int64_t n = dsa_select_topk(qip + t * Hi * Di, wip + t * Hi, kip + s0 * Di, t - s0 + 1, Hi, Di,
                                          indexer->softmax_scale, S, row);
        for (int64_t j = 0; j < n; ++j) row[j] += static_cast<int32_t>(s0);
        cntp[t] = static_cast<int32_t>(n);
      }
    });
    out = dsa_sparse_attention(q, k, v, sel, count, scale_);
    if (kl_loss) {
      // coeff · (1/T) Σ_t KL_t; its gradient enters through qi, ki, wi (the main
      // attention's q and k are the target's, detached).
      const IndexerKL kl = dsa_indexer_kl(q.detach(), k.detach(), scale_, qi.detach(), ki.detach(), wi.detach(),
                                          indexer->softmax_scale, start_of, indexer_loss_sparse_, sel, count,
                                          indexer_loss_coeff_ / static_cast<double>(T));
      indexer_stats_.loss_sum += kl.kl_sum / static_cast<double>(T);
      indexer_stats_.forwards += 1;
      Tensor attached = out.detach().clone();
      autograd::record_fn("DsaIndexerLoss", {out, qi, ki, wi}, {attached},
                          [kl](const std::vector<Tensor>& g) {
                            return std::vector<Tensor>{g[0], kl.dqi, kl.dki, kl.dwi};
                          });
      out = attached;
    }
  } else {
    TITAN_CHECK(!autograd::GradMode::enabled() || !x.requires_grad(),
                "DeepSeekSparseAttention: the paged-cache path runs without autograd (use NoGradGuard)");
    TITAN_CHECK(cache != nullptr && cache->paged.size() == 3,
                "DeepSeekSparseAttention (layer {}): the generator path needs the layer's latent and indexer cache",
                layer_id_);
    out = paged_forward(p, qi, ki, wi, batch, *cache);
  }
  return o_proj->forward(out.view({T, H_ * vd_}));
}

Tensor DeepSeekSparseAttention::paged_forward(const Projected& p, const Tensor& qi, const Tensor& ki,
                                              const Tensor& wi, const ForwardBatch& batch, LayerCache& cache) const {
  const int64_t T = p.c.size(0), Hi = indexer->n_heads, Di = indexer->head_dim;
  const ModelCache& mc = *batch.kv;
  const int64_t B = mc.block_size, NB = mc.num_blocks;
  // 1. This chunk's latent, rotated RoPE key and indexer key into the pages.
  struct Entry {
    Tensor src;
    float* pages;
    int64_t width;
  };
  const Entry entries[3] = {{p.c.contiguous(), cache.paged[0].data<float>(), kvr_},
                            {p.k_rope.contiguous(), cache.paged[1].data<float>(), rope_dim_},
                            {ki, cache.paged[2].data<float>(), Di}};
  const int64_t* slots = batch.slot_mapping.data<int64_t>();
  for (int64_t t = 0; t < T; ++t) {
    const int64_t s = slots[t];
    if (s < 0) continue;
    TITAN_CHECK(s < NB * B, "DeepSeekSparseAttention: slot_mapping[{}] = {} is outside the cache ({} slots)", t, s,
                NB * B);
    for (const Entry& en : entries)
      std::memcpy(en.pages + s * en.width, en.src.data<float>() + t * en.width,
                  sizeof(float) * static_cast<size_t>(en.width));
  }
  // 2. Per sequence: select among positions 0 .. its last query from the cached indexer
  // keys, rebuild the selected keys and values from the cached latent, attend.
  const int32_t* seq = batch.seq_ids.data<int32_t>();
  const int32_t* pos = batch.positions.data<int32_t>();
  const int32_t* bt = batch.block_tables.data<int32_t>();
  const int64_t max_blocks = batch.block_tables.size(1), num_seqs = batch.block_tables.size(0);
  std::map<int32_t, std::vector<int64_t>> tokens_of;
  for (int64_t t = 0; t < T; ++t) {
    TITAN_CHECK(seq[t] >= 0 && seq[t] < num_seqs, "DeepSeekSparseAttention: seq_ids[{}] = {} is outside [0, {})", t,
                seq[t], num_seqs);
    tokens_of[seq[t]].push_back(t);
  }
  const Tensor q = cat({p.q_nope, p.q_rope}, 2).contiguous();  // (T, H, qk)
  const int64_t qk = nope_ + rope_dim_;
  Tensor out = Tensor::empty({T, H_, vd_});
  for (const auto& [s, toks] : tokens_of) {
    int64_t pmax = 0;
    for (int64_t t : toks) pmax = std::max<int64_t>(pmax, pos[t]);
    const int64_t P = pmax + 1;
    TITAN_CHECK((P + B - 1) / B <= max_blocks,
                "DeepSeekSparseAttention: position {} needs {} blocks, the block table has {}", pmax, (P + B - 1) / B,
                max_blocks);
    auto slot_of = [&](int64_t i) {
      const int32_t blk = bt[s * max_blocks + i / B];
      TITAN_CHECK(blk >= 0 && blk < NB, "DeepSeekSparseAttention: block_tables[{}][{}] = {} is outside [0, {})", s,
                  i / B, blk, NB);
      return static_cast<int64_t>(blk) * B + i % B;
    };
    // The indexer keys of positions 0 .. P-1, then each query's selection.
    Tensor KI = Tensor::empty({P, Di});
    for (int64_t i = 0; i < P; ++i)
      std::memcpy(KI.data<float>() + i * Di, entries[2].pages + slot_of(i) * Di, sizeof(float) * static_cast<size_t>(Di));
    const int64_t n = static_cast<int64_t>(toks.size()), S = std::min<int64_t>(indexer->topk, P);
    Tensor qs = Tensor::empty({n, H_, qk}), sel = Tensor::zeros({n, S}, DType::i32), count = Tensor::empty({n}, DType::i32);
    int32_t *selp = sel.data<int32_t>(), *cntp = count.data<int32_t>();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = toks[static_cast<size_t>(i)];
      std::memcpy(qs.data<float>() + i * H_ * qk, q.data<float>() + t * H_ * qk, sizeof(float) * static_cast<size_t>(H_ * qk));
      cntp[i] = static_cast<int32_t>(dsa_select_topk(qi.data<float>() + t * Hi * Di, wi.data<float>() + t * Hi,
                                                     KI.data<float>(), pos[t] + 1, Hi, Di, indexer->softmax_scale, S,
                                                     selp + i * S));
    }
    // Only the selected positions are expanded (at most index_topk per query): kv_b_proj is
    // row-invariant and the rest are copies, so these keys and values are the trainer's
    // bits; sel is renumbered to rows of the expanded set, keeping its ascending order.
    std::vector<int32_t> row_of(static_cast<size_t>(P), -1), used;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < cntp[i]; ++j) row_of[static_cast<size_t>(selp[i * S + j])] = 0;
    for (int64_t i = 0; i < P; ++i)
      if (row_of[static_cast<size_t>(i)] == 0) {
        row_of[static_cast<size_t>(i)] = static_cast<int32_t>(used.size());
        used.push_back(static_cast<int32_t>(i));
      }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < cntp[i]; ++j) selp[i * S + j] = row_of[static_cast<size_t>(selp[i * S + j])];
    const int64_t U = static_cast<int64_t>(used.size());
    Tensor C = Tensor::empty({U, kvr_}), KR = Tensor::empty({U, 1, rope_dim_});
    for (int64_t u = 0; u < U; ++u) {
      const int64_t slot = slot_of(used[static_cast<size_t>(u)]);
      std::memcpy(C.data<float>() + u * kvr_, entries[0].pages + slot * kvr_, sizeof(float) * static_cast<size_t>(kvr_));
      std::memcpy(KR.data<float>() + u * rope_dim_, entries[1].pages + slot * rope_dim_,
                  sizeof(float) * static_cast<size_t>(rope_dim_));
    }
    const Tensor kv = kv_b_proj->forward(C).view({U, H_, nope_ + vd_});
    const Tensor k = cat({kv.narrow(2, 0, nope_), KR.expand({U, H_, rope_dim_})}, 2);
    const Tensor v = kv.narrow(2, nope_, vd_).contiguous();
    const Tensor os = dsa_sparse_attention(qs, k, v, sel, count, scale_);
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(out.data<float>() + toks[static_cast<size_t>(i)] * H_ * vd_, os.data<float>() + i * H_ * vd_,
                  sizeof(float) * static_cast<size_t>(H_ * vd_));
  }
  return out;
}

LayerCacheSpec DeepSeekSparseAttention::cache_spec(int block_size) const {
  LayerCacheSpec s = MultiHeadLatentAttention::cache_spec(block_size);
  s.paged.push_back({"indexer_k", {block_size, indexer->head_dim}});
  return s;
}

void DeepSeekSparseAttention::init_weights(const nn::InitContext& ctx) {
  MultiHeadLatentAttention::init_weights(ctx);
  indexer->init_weights(ctx);
}

void DeepSeekSparseAttention::repack_for_decode() {
  MultiHeadLatentAttention::repack_for_decode();
  indexer->repack_for_decode();
}

}  // namespace titan::models
