// The lightning indexer's KL loss (DeepSeek-AI 2025, "DeepSeek-V3.2-Exp: Boosting
// Long-Context Efficiency with DeepSeek Sparse Attention", §2.1, continued pre-training).
// For query t over a candidate key set C_t:
//   p_t(s)  = (1/H) Σ_h softmax_{s∈C_t}(scale · q[t,h]·k[s,h])      the main attention,
//             summed over its H heads and L1-normalised (a constant: no gradient)
//   r_t(s)  = softmax_{s∈C_t}(I[t,s]),  I[t,s] = Σ_h' w[t,h'] relu(iscale · q_I[t,h']·k_I[s])
//   KL_t    = Σ_{s∈C_t} p_t(s) (log p_t(s) - log r_t(s))
// Stages (the paper's): dense warm-up, C_t = every causal key of t's document; sparse
// training, C_t = the index_topk keys the indexer selected for t (sel / count).
// dKL_t / dI[t,s] = r_t(s) - p_t(s); the chain rule through I gives the gradients of the
// indexer's q_I, k_I and w.
#pragma once
#include <cstdint>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::models {

struct IndexerKL {
  double kl_sum = 0;     // Σ_t KL_t (nats)
  Tensor dqi, dki, dwi;  // grad_scale · d(Σ_t KL_t) / d(q_I, k_I, w): (T, Hi, Di), (T, Di), (T, Hi) f32
};

// q, k (T, H, Dk) f32: the main attention's queries and keys (RoPE applied), scale its
// softmax scale; qi (T, Hi, Di), ki (T, Di), wi (T, Hi) f32: the indexer's queries, keys
// and head weights (wi already times Hi^-0.5), iscale = Di^-0.5. start_of[t]: the first
// token of t's document. sel (T, S) / count (T) i32 (dsa_sparse_attention's): the sparse
// stage's candidate sets when sparse, else ignored (dense: keys start_of[t] .. t).
// Sums in double, each query's terms in ascending key order, dk_I accumulated in
// ascending t: the same bits whatever the thread count. Throws titan::Error on shapes
// that do not agree.
IndexerKL dsa_indexer_kl(const Tensor& q, const Tensor& k, double scale, const Tensor& qi, const Tensor& ki,
                         const Tensor& wi, double iscale, const std::vector<int32_t>& start_of, bool sparse,
                         const Tensor& sel, const Tensor& count, double grad_scale);

}  // namespace titan::models
