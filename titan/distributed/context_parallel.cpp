#include "titan/distributed/context_parallel.h"

#include <vector>

#include "titan/core/error.h"
#include "titan/models/common/layer_spec.h"
#include "titan/ops/attention.h"
#include "titan/ops/index.h"
#include "titan/ops/join.h"

namespace titan::distributed {

ContextParallel::ContextParallel(ProcessGroup& cp) : comm_(cp) {}

void ContextParallel::check_model(const models::TransformerConfig& cfg, int cp) {
  if (cp == 1) return;
  TITAN_CHECK(cfg.final_logit_softcapping == 0,
              "parallelism.context_parallel_degree={}: final_logit_softcapping is not supported with context "
              "parallelism", cp);
  const std::vector<models::LayerSpec> specs = models::layer_specs(cfg);
  for (size_t l = 0; l < specs.size(); ++l) {
    TITAN_CHECK(specs[l].mixer == models::MixerKind::gqa,
                "parallelism.context_parallel_degree={}: layer {} is a {} layer; context parallelism supports gqa "
                "attention layers only",
                cp, l, models::mixer_kind_name(specs[l].mixer));
    TITAN_CHECK(specs[l].ffn == models::FfnKind::dense,
                "parallelism.context_parallel_degree={}: layer {} has a {} feed-forward; context parallelism "
                "supports dense feed-forwards only",
                cp, l, models::ffn_kind_name(specs[l].ffn));
  }
}

ContextParallel::Local ContextParallel::shard(const models::ForwardBatch& input, const Tensor& targets,
                                              int64_t seq_len) {
  const int64_t C = size(), me = comm_.rank(), T = input.num_tokens();
  TITAN_CHECK(seq_len > 0 && seq_len % (2 * C) == 0 && T % seq_len == 0,
              "context parallelism: a batch of {} tokens in rows of {} cannot be cut into 2 × {} chunks per row", T,
              seq_len, C);
  TITAN_CHECK(targets.numel() == T, "context parallelism: {} targets for {} tokens", targets.numel(), T);
  const int64_t L = seq_len / (2 * C), rows = T / seq_len;
  T_ = T;
  Tl_ = T / C;
  // tokens_of(r): the tokens of cp rank r, in its local order.
  auto tokens_of = [&](int64_t r) {
    std::vector<int64_t> t;
    t.reserve(static_cast<size_t>(Tl_));
    for (int64_t row = 0; row < rows; ++row)
      for (int64_t chunk : {r, 2 * C - 1 - r})
        for (int64_t j = 0; j < L; ++j) t.push_back(row * seq_len + chunk * L + j);
    return t;
  };
  std::vector<int64_t> from_gathered(static_cast<size_t>(T)), query_rows(static_cast<size_t>(T), Tl_);
  std::vector<int64_t> mine;
  for (int64_t r = 0; r < C; ++r) {
    const std::vector<int64_t> t = tokens_of(r);
    for (int64_t j = 0; j < Tl_; ++j) from_gathered[static_cast<size_t>(t[j])] = r * Tl_ + j;
    if (r == me) {
      for (int64_t j = 0; j < Tl_; ++j) query_rows[static_cast<size_t>(t[j])] = j;
      mine = t;
    }
  }
  local_tokens_ = Tensor::from_vector(mine, {Tl_});
  from_gathered_ = Tensor::from_vector(from_gathered, {T});
  query_rows_ = Tensor::from_vector(query_rows, {T});
  cu_seqlens_ = input.cu_seqlens;
  Local out;
  out.input = input;
  out.input.tokens = index_select(input.tokens, 0, local_tokens_).contiguous();
  out.input.positions = index_select(input.positions, 0, local_tokens_).contiguous();
  out.targets = index_select(targets, 0, local_tokens_).contiguous();
  return out;
}

Tensor ContextParallel::attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const AttentionOptions& opts) const {
  TITAN_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3 && q.size(0) == Tl_ && k.size(0) == Tl_ &&
                  v.size(0) == Tl_,
              "context parallelism: attention of {} / {} / {} query / key / value rows on a layout of {} local "
              "tokens (shard() the batch first)",
              q.dim() ? q.size(0) : 0, k.dim() ? k.size(0) : 0, v.dim() ? v.size(0) : 0, Tl_);
  // K, V of every cp rank (rank-major), then in token order.
  Tensor kf = index_select(gather_from_sp(k, comm_), 0, from_gathered_).contiguous();
  Tensor vf = index_select(gather_from_sp(v, comm_), 0, from_gathered_).contiguous();
  // The local queries at their tokens, zero rows elsewhere.
  Tensor zero = Tensor::zeros({1, q.size(1), q.size(2)});
  Tensor qf = index_select(cat({q, zero}, 0), 0, query_rows_).contiguous();
  Tensor out = scaled_dot_product_attention_varlen(qf, kf, vf, cu_seqlens_, opts);
  return index_select(out, 0, local_tokens_).contiguous();
}

Tensor ContextParallel::gather_rows(const Tensor& local) const {
  TITAN_CHECK(local.dim() == 1 && local.size(0) == Tl_,
              "context parallelism: gather_rows of {} values on a layout of {} local tokens", local.numel(), Tl_);
  Tensor all = comm_.all_gather_rows(local.detach().contiguous());
  return index_select(all, 0, from_gathered_).contiguous();
}

}  // namespace titan::distributed
