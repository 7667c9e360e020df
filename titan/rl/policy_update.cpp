#include "titan/rl/policy_update.h"

#include <algorithm>
#include <cmath>

#include "titan/autograd/function.h"
#include "titan/autograd/node.h"
#include "titan/core/error.h"
#include "titan/ops/index.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/loss.h"
#include "titan/ops/matmul.h"

namespace titan::rl {

namespace {

// One training sequence: a turn of a rollout.
struct Seq {
  const TurnTokens* turn;
  double advantage;
  int64_t length() const { return static_cast<int64_t>(turn->prompt_ids.size() + turn->completion_ids.size()); }
};

// Mean entropy terms of the rows' distributions softmax(logits / temperature), in
// double: H = lse(z) - Σ p z. Returns the sum over rows.
double entropy_sum(const Tensor& logits, double temperature) {
  const Tensor l = logits.contiguous();
  const int64_t T = l.size(0), V = l.size(1);
  const float* p = l.data<float>();
  double total = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* row = p + t * V;
    double mx = -INFINITY;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]) / temperature);
    double z = 0, ez = 0;
    for (int64_t v = 0; v < V; ++v) {
      const double x = static_cast<double>(row[v]) / temperature - mx;
      const double e = std::exp(x);
      z += e;
      ez += e * x;
    }
    total += std::log(z) - ez / z;
  }
  return total;
}

// (T, V/P) vocabulary pieces, rank r holding columns [r V/P, (r+1) V/P) -> the full
// (T, V) logits on every tp rank (all-gather, rank order). Backward: this rank's
// columns of the (replicated) gradient.
Tensor gather_vocab(const Tensor& local, distributed::TpComm& c) {
  Tensor out;
  {
    autograd::NoGradGuard ng;
    const Tensor full_t = c.all_gather_rows(local.detach().transpose(0, 1).contiguous());  // (V, T)
    out = full_t.transpose(0, 1).contiguous();
  }
  if (autograd::needs_grad({&local})) {
    const int64_t r = c.rank(), Vl = local.size(1);
    autograd::record_fn("GatherVocabFromTensorParallel", {local}, {out}, [r, Vl](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{g[0].narrow(1, r * Vl, Vl).contiguous()};
    });
  }
  return out;
}

// One microbatch's contribution to the step's statistics (sums over its tokens).
struct MicroStats {
  double loss = 0, diff_max = 0, diff_sum = 0, gap_sum = 0, ent_sum = 0, clip_sum = 0, ratio_sum = 0, kl_sum = 0,
         ratio_max = 0, mismatch = 0, packed = 0;
  static constexpr size_t kFields = 11;
};
static_assert(sizeof(MicroStats) == MicroStats::kFields * sizeof(double));

// Forward, loss and backward of the sequences [begin, end) (gradients accumulate in
// the parameters' .grad); returns their statistics.
MicroStats run_microbatch(models::Decoder& policy, const models::Decoder* ref, const std::vector<Seq>& seqs,
                          size_t begin, size_t end, const PolicyUpdateSettings& s, int64_t total_sequences,
                          int64_t total_tokens, distributed::TpComm* tp) {
  MicroStats ms;
  std::vector<std::vector<int32_t>> docs;
  std::vector<int64_t> rows, offsets{0};
  std::vector<int32_t> targets;
  std::vector<float> old_lp, adv;
  int64_t start = 0;
  for (size_t k = begin; k < end; ++k) {
    const TurnTokens& t = *seqs[k].turn;
    std::vector<int32_t> d = t.prompt_ids;
    d.insert(d.end(), t.completion_ids.begin(), t.completion_ids.end());
    const int64_t P = static_cast<int64_t>(t.prompt_ids.size());
    const int64_t n = static_cast<int64_t>(t.completion_ids.size());
    for (int64_t j = 0; j < n; ++j) rows.push_back(start + P - 1 + j);  // row predicting completion token j
    targets.insert(targets.end(), t.completion_ids.begin(), t.completion_ids.end());
    old_lp.insert(old_lp.end(), t.logprobs.begin(), t.logprobs.end());
    adv.insert(adv.end(), static_cast<size_t>(n), static_cast<float>(seqs[k].advantage));
    offsets.push_back(offsets.back() + n);
    start += static_cast<int64_t>(d.size());
    docs.push_back(std::move(d));
  }
  ms.packed = static_cast<double>(start);
  const int64_t N = static_cast<int64_t>(targets.size());
  models::ForwardBatch fb = models::make_packed_batch(docs);
  std::vector<Tensor> routed;  // the trainer's (T, K) expert ids per MoE layer
  if (policy.config().is_moe()) fb.routed_experts = &routed;
  const Tensor row_idx = Tensor::from_vector(rows, {N});
  const Tensor tg = Tensor::from_vector(targets, {N});
  const Tensor hidden = policy.forward(fb);
  const Tensor h = index_select(hidden, 0, row_idx);
  Tensor lp, full_logits;  // full_logits: tp only, (N, V)
  if (tp) {
    full_logits = gather_vocab(linear(distributed::copy_to_tp(h, *tp), policy.lm_head_weight()), *tp);
    const Tensor z = s.temperature == 1.0 ? full_logits : scale(full_logits, 1.0 / s.temperature);
    lp = scale(cross_entropy(z, tg, -100, 0.0, Reduction::none), -1.0);
  } else {
    lp = policy.logprobs(h, tg, s.temperature);  // the generator's LM head chain (bf16 in bf16 compute)
  }
  PolicyLossInputs in;
  in.logprobs = lp;
  in.old_logprobs = Tensor::from_vector(old_lp, {N});
  in.advantages = Tensor::from_vector(adv, {N});
  in.seq_offsets = offsets;
  in.total_sequences = total_sequences;
  in.total_tokens = total_tokens;
  int64_t mismatch = 0;  // trained tokens routed differently than by the generator
  {
    autograd::NoGradGuard ng;
    if (s.loss.kl_coef > 0) {
      const Tensor rh = index_select(ref->forward(fb), 0, row_idx);
      in.ref_logprobs = ref->logprobs(rh, tg, s.temperature);
    }
    // The trainer/generator gap on exactly the tokens trained, from this forward.
    const std::vector<float> tl = lp.detach().to_vector<float>();
    for (int64_t j = 0; j < N; ++j) {
      const double d = static_cast<double>(tl[j]) - static_cast<double>(old_lp[j]);
      ms.diff_max = std::max(ms.diff_max, std::fabs(d));
      ms.diff_sum += std::fabs(d);
      ms.gap_sum -= d;  // logp_gen - logp_train
    }
    ms.ent_sum = entropy_sum(tp ? full_logits.detach() : policy.logits(h.detach()), s.temperature);
    // Routing: the row predicting completion token j routed as the generator's did?
    int64_t jj = 0;
    for (size_t k = begin; k < end; ++k) {
      const TurnTokens& t = *seqs[k].turn;
      const size_t n = t.completion_ids.size();
      if (!t.routed_experts.empty()) {
        const size_t W = t.routed_experts.size() / n;
        for (size_t j = 0; j < n; ++j) {
          const int64_t row = rows[static_cast<size_t>(jj) + j];
          size_t w = 0;
          bool same = true;
          for (const Tensor& ids : routed) {
            if (!ids.defined()) continue;
            const int64_t K = ids.size(1);
            const int32_t* p = ids.data<int32_t>() + row * K;
            for (int64_t q = 0; q < K; ++q, ++w) same = same && w < W && t.routed_experts[j * W + w] == p[q];
          }
          mismatch += (!same || w != W) ? 1 : 0;
        }
      }
      jj += static_cast<int64_t>(n);
    }
  }
  ms.mismatch = static_cast<double>(mismatch);
  PolicyLossResult res = policy_loss(in, s.loss);
  ms.loss = res.loss.detach().item<double>();
  res.loss.backward();
  ms.clip_sum = res.stats.clip_frac * N;
  ms.ratio_sum = res.stats.ratio_mean * N;
  ms.kl_sum = res.stats.kl_mean * N;
  ms.ratio_max = res.stats.ratio_max;
  return ms;
}

}  // namespace

PolicyUpdateStats policy_update_backward(models::Decoder& policy, const models::Decoder* ref,
                                         const std::vector<const TokenRollout*>& rollouts,
                                         const std::vector<double>& advantages, const PolicyUpdateSettings& s,
                                         const DataParallelShare* share) {
  TITAN_CHECK(rollouts.size() == advantages.size(),
              "policy_update_backward: {} rollouts but {} advantages", rollouts.size(), advantages.size());
  TITAN_CHECK(s.loss.kl_coef <= 0 || ref != nullptr,
              "policy_update_backward: rl.kl_coef={} needs a reference model", s.loss.kl_coef);
  TITAN_CHECK(s.microbatch_tokens >= 1, "policy_update_backward: rl.microbatch_tokens must be >= 1, got {}",
              s.microbatch_tokens);
  TITAN_CHECK(share == nullptr || (share->fsdp != nullptr && share->dp != nullptr &&
                                   (share->tp == nullptr) == (share->tp_comm == nullptr)),
              "policy_update_backward: a DataParallelShare needs its FullyShard and dp group (and with tp, its group)");
  std::vector<Seq> seqs;
  for (size_t i = 0; i < rollouts.size(); ++i)
    for (const TurnTokens& t : rollouts[i]->turns) {
      TITAN_CHECK(t.logprobs.size() == t.completion_ids.size(),
                  "policy_update_backward: rollout '{}' has a turn with {} completion tokens but {} logprobs",
                  rollouts[i]->rollout.id, t.completion_ids.size(), t.logprobs.size());
      if (t.completion_ids.empty() || t.prompt_ids.empty()) continue;
      seqs.push_back({&t, advantages[i] * t.advantage_scale});
    }
  PolicyUpdateStats st;
  st.sequences = static_cast<int64_t>(seqs.size());
  for (const Seq& q : seqs) st.tokens += static_cast<int64_t>(q.turn->completion_ids.size());
  if (seqs.empty()) return st;

  // Microbatches: whole sequences while the packed length stays within the budget.
  std::vector<std::pair<size_t, size_t>> micro;
  for (size_t begin = 0; begin < seqs.size();) {
    size_t end = begin;
    int64_t packed = 0;
    while (end < seqs.size() && (end == begin || packed + seqs[end].length() <= s.microbatch_tokens))
      packed += seqs[end++].length();
    micro.emplace_back(begin, end);
    begin = end;
  }
  const size_t M = micro.size();
  const size_t dp = share ? static_cast<size_t>(share->dp->size()) : 1;
  const size_t me = share ? static_cast<size_t>(share->dp->rank()) : 0;
  const size_t rounds = (M + dp - 1) / dp;
  std::vector<MicroStats> mine(rounds);
  for (size_t k = 0; k < rounds; ++k) {
    const size_t j = k * dp + me;
    if (j >= M) {
      share->fsdp->skip_microbatch();
      continue;
    }
    if (share) share->fsdp->unshard_root();
    mine[k] = run_microbatch(policy, ref, seqs, micro[j].first, micro[j].second, s, st.sequences, st.tokens,
                             share ? share->tp_comm : nullptr);
    if (share && share->tp) share->tp->reduce_partial_grads();  // FSDP takes each microbatch's full gradients
    if (share) share->fsdp->reduce_gradients();
  }
  std::vector<MicroStats> all(rounds * dp);  // rank q's rounds at [q · rounds, (q + 1) · rounds)
  if (share)
    share->dp->all_gather_bytes(mine.data(), rounds * sizeof(MicroStats), all.data());
  else
    all = mine;
  double diff_sum = 0, gap_sum = 0, ent_sum = 0, clip_sum = 0, ratio_sum = 0, kl_sum = 0, mismatch = 0;
  for (size_t j = 0; j < M; ++j) {  // in microbatch order, as one rank processes them
    const MicroStats& m = all[(j % dp) * rounds + j / dp];
    st.loss += m.loss;
    st.logprob_diff_max = std::max(st.logprob_diff_max, m.diff_max);
    diff_sum += m.diff_sum;
    gap_sum += m.gap_sum;
    ent_sum += m.ent_sum;
    clip_sum += m.clip_sum;
    ratio_sum += m.ratio_sum;
    kl_sum += m.kl_sum;
    mismatch += m.mismatch;
    st.ratio_max = std::max(st.ratio_max, m.ratio_max);
    st.packed_tokens += static_cast<int64_t>(m.packed);
  }
  st.microbatches = static_cast<int64_t>(M);
  const double n = static_cast<double>(st.tokens);
  st.logprob_diff_mean = diff_sum / n;
  st.routing_mismatch_frac = mismatch / n;
  st.kl_gen_train = gap_sum / n;
  st.entropy = ent_sum / n;
  st.clip_frac = clip_sum / n;
  st.ratio_mean = ratio_sum / n;
  st.kl_ref_mean = kl_sum / n;
  return st;
}

}  // namespace titan::rl
