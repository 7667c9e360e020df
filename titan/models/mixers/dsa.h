// DeepSeek sparse attention (DSA), the `dsa` mixer of DeepSeek-V3.2 (DeepSeek-AI 2025,
// "DeepSeek-V3.2-Exp: Boosting Long-Context Efficiency with DeepSeek Sparse Attention",
// §2.1; HF DeepseekV32Attention / DeepseekV32Indexer). An MLA layer (models/mixers/mla.h)
// whose attention visits, per query, only the index_topk keys a lightning indexer picks.
//
// The lightning indexer (parameter names as HF: indexer.wq_b, indexer.wk, indexer.k_norm
// (LayerNorm, weight + bias, eps 1e-6), indexer.weights_proj), fp32, for query t and key s:
//   q_I[t]  = RoPE_half(wq_b(q_resid[t]))       (Hi, Di), q_resid = q_a_layernorm(q_a_proj(x))
//   k_I[s]  = RoPE_half(k_norm(wk(x[s])))       (Di), one key head shared by the Hi heads
//   w[t]    = weights_proj(x[t]) · Hi^-0.5      (Hi)
//   I[t, s] = Σ_h w[t, h] · relu(Di^-0.5 · q_I[t, h] · k_I[s])
// RoPE_half rotates the first qk_rope_head_dim dims with the model's tables in the
// rotate-half pairing (the main attention's MLA RoPE is interleaved). The keys s <= t of
// t's sequence with the index_topk largest I[t, s] are selected, ties to the earlier
// position (all of them when there are at most index_topk). The attention is MLA's
// (latent expanded through kv_b_proj, the same softmax scale) over the selected keys only.
//
// Gradients follow the reference: the selection is discrete and the indexer reads its
// inputs detached, so the LM loss trains the attention and nothing of the indexer (its
// parameters get no gradient from it). With indexer_loss_coeff > 0 the trainer path adds
// the paper's indexer loss (§2.1; models/mixers/dsa_indexer_loss.h) with weight
// indexer_loss_coeff, per forward coeff · (1/T) Σ_t KL_t over its T query tokens, the
// target (the main attention's distribution) detached, so its gradient reaches only the
// indexer's parameters; indexer_loss_stage picks the paper's stage: "dense" (warm-up: KL
// over every causal key) or "sparse" (over the selected keys only). The forward's value
// is unchanged (the model still attends sparsely in both stages; the paper's dense
// warm-up also runs the main attention densely, which equals this when index_topk >= the
// sequence). With gradient accumulation each microbatch's term adds, as the MoE
// sequence aux loss does. The loss value (without the coefficient) is kept per layer
// for the trainer's indexer_loss metric (take_indexer_loss_stats).
//
// One arithmetic for trainer and generator: the indexer scores and the sparse attention
// are one scalar kernel each (a fixed loop order per query, keys visited in ascending
// position), the generator caches c, k_rope (as MLA) and k_I per token and rebuilds the
// keys and values from the cache through the same row-invariant projections, so prefill
// and token-by-token decode give the same bits.
#pragma once
#include <memory>

#include "titan/models/mixers/mla.h"

namespace titan::models {

// torch.nn.LayerNorm with weight and bias over the last dim (ops/norm.h layer_norm).
class LayerNorm : public nn::Module {
 public:
  LayerNorm(int64_t dim, double eps);
  void init_weights(const nn::InitContext& ctx) override;  // weight 1, bias 0
  Tensor forward(const Tensor& x) const;
  Tensor weight, bias;
  double eps;
};

// DSA's lightning indexer (see above). Registered as "indexer" in the attention.
class LightningIndexer : public nn::Module {
 public:
  LightningIndexer(const TransformerConfig& cfg, int layer_id, std::shared_ptr<const RopeCache> rope);
  // q_resid (T, q_lora_rank) -> q_I (T, Hi, Di).
  Tensor queries(const Tensor& q_resid, const Tensor& positions) const;
  // x (T, D) -> k_I (T, Di).
  Tensor keys(const Tensor& x, const Tensor& positions) const;
  // x (T, D) -> w (T, Hi), already times Hi^-0.5.
  Tensor head_weights(const Tensor& x) const;
  void init_weights(const nn::InitContext& ctx) override;
  void repack_for_decode();

  Linear *wq_b, *wk, *weights_proj;
  LayerNorm* k_norm;
  int64_t n_heads, head_dim, topk;
  float softmax_scale;  // Di^-0.5

 private:
  std::shared_ptr<const RopeCache> rope_;
  int layer_id_;
};

struct IndexerLossStats {
  double loss_sum = 0;
  int64_t forwards = 0;
};

class DeepSeekSparseAttention : public MultiHeadLatentAttention {
 public:
  // cfg.is_dsa() (index_topk, index_n_heads, index_head_dim; q_lora_rank > 0).
  DeepSeekSparseAttention(const TransformerConfig& cfg, int layer_id, std::shared_ptr<const RopeCache> rope);
  // x (T, D) f32 -> (T, D). Trainer path (batch.kv null): per document of cu_seqlens, the
  // indexer's selection then the sparse attention, differentiable in everything but the
  // indexer. Generator path: writes c, k_rope and k_I to cache->paged {latent, k_rope,
  // indexer_k}, then per sequence rebuilds keys, values and indexer keys of positions
  // 0 .. its last query from the cache. Throws titan::Error on the generator path without
  // this layer's cache or with autograd recording.
  Tensor forward(const Tensor& x, const ForwardBatch& batch, LayerCache* cache) const override;
  // Paged: latent (B, kv_lora_rank), k_rope (B, qk_rope_head_dim), indexer_k (B, index_head_dim).
  LayerCacheSpec cache_spec(int block_size) const override;
  void init_weights(const nn::InitContext& ctx) override;
  void repack_for_decode() override;

  LightningIndexer* indexer;

  // The indexer loss's (1/T) Σ_t KL_t summed over the trainer forwards since the last
  // call, and how many forwards; then cleared.
  IndexerLossStats take_indexer_loss_stats();

 private:
  double indexer_loss_coeff_ = 0;
  bool indexer_loss_sparse_ = false;
  mutable IndexerLossStats indexer_stats_;
  Tensor paged_forward(const Projected& p, const Tensor& qi, const Tensor& ki, const Tensor& wi,
                       const ForwardBatch& batch, LayerCache& cache) const;
};

// The indexer's selection for one query: scores I[s] (above) of keys s = 0 .. n-1
// (keys (n, Di) f32 rows) for the query q (Hi, Di) f32 with head weights w (Hi) f32,
// then the min(topk, n) largest, ties to the smaller s (a NaN score counts as -inf).
// Writes the selected s in ascending order to out (topk i32) and returns their count.
int64_t dsa_select_topk(const float* q, const float* w, const float* keys, int64_t n, int64_t Hi, int64_t Di,
                        float scale, int64_t topk, int32_t* out);

// Sparse softmax attention: q (T, H, Dk), k (N, H, Dk), v (N, H, Dv) f32; sel (T, S) i32
// and count (T) i32: query t attends to the rows sel[t, 0 .. count[t]) of k / v (each in
// [0, N), count in [1, S]). out[t, h] = Σ_j softmax_j(scale · q[t,h]·k[sel_j,h]) v[sel_j,h],
// (T, H, Dv), each (t, h) one scalar loop over j in sel order (so the same bits whatever
// T, N or the thread count). Differentiable in q, k and v (backward parallel over heads).
// Throws titan::Error on bad shapes or an index outside [0, N).
Tensor dsa_sparse_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& sel,
                            const Tensor& count, double scale);

}  // namespace titan::models
