#include "titan/rl/policy_loss.h"

#include <algorithm>
#include <cmath>

#include "titan/core/error.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/reduce.h"

namespace titan::rl {
namespace {

void check_tokens(const char* arg, const Tensor& t, int64_t n) {
  TITAN_CHECK(t.defined(), "policy_loss: argument '{}' is undefined", arg);
  TITAN_CHECK(t.dtype() == DType::f32, "policy_loss: argument '{}' must be f32, got {}", arg,
              dtype_name(t.dtype()));
  TITAN_CHECK(t.dim() == 1 && (n < 0 || t.size(0) == n),
              "policy_loss: argument '{}' must have shape [{}], got {}", arg,
              n < 0 ? std::string("N") : std::to_string(n), shape_str(t.shape()));
}

void check_inputs(const PolicyLossInputs& in, const PolicyLossConfig& cfg) {
  check_tokens("logprobs", in.logprobs, -1);
  const int64_t n = in.logprobs.size(0);
  TITAN_CHECK(n >= 1, "policy_loss: argument 'logprobs' is empty (shape [0])");
  check_tokens("old_logprobs", in.old_logprobs, n);
  check_tokens("advantages", in.advantages, n);
  if (in.ref_logprobs.defined()) check_tokens("ref_logprobs", in.ref_logprobs, n);
  TITAN_CHECK(std::isfinite(cfg.kl_coef) && cfg.kl_coef >= 0,
              "policy_loss: argument 'cfg.kl_coef' must be finite and >= 0, got {}", cfg.kl_coef);
  TITAN_CHECK(cfg.kl_coef == 0 || in.ref_logprobs.defined(),
              "policy_loss: argument 'ref_logprobs' is undefined but cfg.kl_coef = {} > 0",
              cfg.kl_coef);
  TITAN_CHECK(cfg.epsilon_low >= 0 && cfg.epsilon_low < 1,
              "policy_loss: argument 'cfg.epsilon_low' must be in [0, 1), got {}", cfg.epsilon_low);
  TITAN_CHECK(std::isfinite(cfg.epsilon_high) && cfg.epsilon_high >= 0,
              "policy_loss: argument 'cfg.epsilon_high' must be finite and >= 0, got {}",
              cfg.epsilon_high);
  const auto& off = in.seq_offsets;
  TITAN_CHECK(off.size() >= 2 && off.front() == 0 && off.back() == n,
              "policy_loss: argument 'seq_offsets' must be [0, ..., N={}] with >= 2 entries, got "
              "{} entries from {} to {}",
              n, off.size(), off.empty() ? 0 : off.front(), off.empty() ? 0 : off.back());
  for (size_t s = 0; s + 1 < off.size(); ++s)
    TITAN_CHECK(off[s + 1] > off[s],
                "policy_loss: argument 'seq_offsets' must increase strictly (every sequence needs "
                ">= 1 token), got {} then {} at index {}",
                off[s], off[s + 1], s);
  const int64_t S = static_cast<int64_t>(off.size()) - 1;
  if (cfg.aggregation == LossAggregation::seq_mean_token_mean)
    TITAN_CHECK(in.total_sequences >= S,
                "policy_loss: argument 'total_sequences' must be >= the {} sequences of this "
                "call (seq_mean_token_mean), got {}",
                S, in.total_sequences);
  else
    TITAN_CHECK(in.total_tokens >= n,
                "policy_loss: argument 'total_tokens' must be >= the {} tokens of this call "
                "(token_mean), got {}",
                n, in.total_tokens);
}

// Aggregation weight of each token (f32): 1/(|o_s| total_sequences) or 1/total_tokens.
std::vector<float> token_weights(const PolicyLossInputs& in, LossAggregation agg, int64_t n) {
  std::vector<float> w(n);
  const auto& off = in.seq_offsets;
  for (size_t s = 0; s + 1 < off.size(); ++s) {
    const double len = static_cast<double>(off[s + 1] - off[s]);
    const double ws = agg == LossAggregation::seq_mean_token_mean
                          ? 1.0 / (len * static_cast<double>(in.total_sequences))
                          : 1.0 / static_cast<double>(in.total_tokens);
    std::fill(w.begin() + off[s], w.begin() + off[s + 1], static_cast<float>(ws));
  }
  return w;
}

}  // namespace

PolicyLossResult policy_loss(const PolicyLossInputs& in, const PolicyLossConfig& cfg) {
  check_inputs(in, cfg);
  const int64_t n = in.logprobs.size(0);
  const Tensor& logp = in.logprobs;
  const Tensor adv = in.advantages.detach();
  const Tensor ratio = exp(sub(logp, in.old_logprobs.detach()));

  // Which tokens select the clipped term (a constant: no gradient), from forward values.
  const std::vector<float> r = ratio.to_vector<float>();
  const std::vector<float> a = adv.to_vector<float>();
  const double hi = 1.0 + cfg.epsilon_high, lo = 1.0 - cfg.epsilon_low;
  std::vector<uint8_t> clipped(n, 0);
  std::vector<float> clipped_value(n, 0.0f);
  PolicyLossStats st;
  st.tokens = n;
  double rsum = 0;
  st.ratio_max = -INFINITY;
  int64_t n_low = 0, n_high = 0;
  for (int64_t t = 0; t < n; ++t) {
    if (a[t] > 0 && r[t] > hi) {
      clipped[t] = 1, ++n_high;
      clipped_value[t] = static_cast<float>(hi * a[t]);
    } else if (a[t] < 0 && r[t] < lo) {
      clipped[t] = 1, ++n_low;
      clipped_value[t] = static_cast<float>(lo * a[t]);
    }
    rsum += r[t];
    st.ratio_max = std::max(st.ratio_max, static_cast<double>(r[t]));
  }
  st.ratio_mean = rsum / static_cast<double>(n);
  st.clip_frac_low = static_cast<double>(n_low) / static_cast<double>(n);
  st.clip_frac_high = static_cast<double>(n_high) / static_cast<double>(n);
  st.clip_frac = static_cast<double>(n_low + n_high) / static_cast<double>(n);

  const Tensor surrogate = where(Tensor::from_vector(clipped, {n}),
                                 Tensor::from_vector(clipped_value, {n}), mul(ratio, adv));
  Tensor per_token = neg(surrogate);
  if (in.ref_logprobs.defined()) {
    const Tensor d = sub(in.ref_logprobs.detach(), logp);
    const Tensor k3 = add(sub(exp(d), d), -1.0);
    double ksum = 0;
    for (float v : k3.to_vector<float>()) ksum += v;
    st.kl_mean = ksum / static_cast<double>(n);
    if (cfg.kl_coef > 0) per_token = add(per_token, scale(k3, cfg.kl_coef));
  }
  const Tensor w = Tensor::from_vector(token_weights(in, cfg.aggregation, n), {n});
  return {sum(mul(per_token, w)), st};
}

}  // namespace titan::rl
