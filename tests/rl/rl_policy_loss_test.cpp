// policy_loss (PPO clip, GRPO/DAPO aggregation, k3 KL) against PyTorch float64
// (tests/reference/rl_ref.py: torch.clamp + torch.min as TRL/verl write it): loss
// values and gradients w.r.t. the trainer logprobs on a hand-made batch of 3 sequences
// (lengths 1, 4, 7) with ratios inside and outside the clip band and advantages of both
// signs, and on random batches; hand-counted clip fractions; microbatch additivity
// (halves with the step normalisers sum to the full loss, gradients bitwise equal);
// argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "tests/util/torch_ref.h"
#include "titan/ops/elementwise.h"
#include "titan/rl/policy_loss.h"

namespace titan::rl {
namespace {

using test::check_ops;
using test::OpCheck;

// Hand-made batch: 3 sequences of 1, 4 and 7 tokens. log-ratios (logprobs - old):
//  seq 0, A = +1.2: 0.3 (r 1.35: above 1.2 and 1.28 -> clipped high)
//  seq 1, A = -0.8: -0.5 (r 0.61 < 0.8 -> clipped low), 0.4 (r 1.49, A<0: unclipped),
//                   0 (r = 1 exactly: tie), -0.1 (in band)
//  seq 2, A = +0.5: 0.22 (r 1.246: clipped for ε_high 0.2, NOT for 0.28), -0.7 (r 0.50,
//                   A>0: unclipped), 0.1, 0.15, -0.05, 0.5 (r 1.65: clipped high), 0.02
struct Batch {
  Tensor logprobs, old_logprobs, ref_logprobs, advantages;
  std::vector<int64_t> offsets;
};

Batch hand_batch() {
  const std::vector<float> dr = {0.3f,  -0.5f, 0.4f,  0.0f,   -0.1f, 0.22f,
                                 -0.7f, 0.1f,  0.15f, -0.05f, 0.5f,  0.02f};
  const std::vector<float> adv_seq = {1.2f, -0.8f, 0.5f};
  Batch b;
  b.offsets = {0, 1, 5, 12};
  std::vector<float> old(12), lp(12), ref(12), adv(12);
  for (int64_t t = 0; t < 12; ++t) {
    old[t] = -1.5f - 0.13f * static_cast<float>(t);
    lp[t] = dr[t] == 0.0f ? old[t] : old[t] + dr[t];
    ref[t] = lp[t] + 0.05f * static_cast<float>((t % 5) - 2);  // KL terms of both signs
  }
  for (size_t s = 0; s + 1 < b.offsets.size(); ++s)
    for (int64_t t = b.offsets[s]; t < b.offsets[s + 1]; ++t) adv[t] = adv_seq[s];
  b.logprobs = Tensor::from_vector(lp, {12});
  b.old_logprobs = Tensor::from_vector(old, {12});
  b.ref_logprobs = Tensor::from_vector(ref, {12});
  b.advantages = Tensor::from_vector(adv, {12});
  return b;
}

// Random batch: S sequences of random lengths in [1, 9], log-ratios ~ 0.3 N(0,1).
Batch random_batch(int64_t S, uint64_t seed) {
  Batch b;
  b.offsets = {0};
  Tensor lens = test::randint({S}, 9, seed);
  for (int64_t l : lens.to_vector<int64_t>()) b.offsets.push_back(b.offsets.back() + l + 1);
  const int64_t n = b.offsets.back();
  b.old_logprobs = scale(abs(test::randn({n}, seed + 1)), -2.0);
  b.logprobs = add(b.old_logprobs, test::randn({n}, seed + 2, 0.3));
  b.ref_logprobs = add(b.logprobs, test::randn({n}, seed + 3, 0.2));
  std::vector<float> adv(n);
  const auto a_seq = test::randn({S}, seed + 4).to_vector<float>();
  for (int64_t s = 0; s < S; ++s)
    for (int64_t t = b.offsets[s]; t < b.offsets[s + 1]; ++t) adv[t] = a_seq[s];
  b.advantages = Tensor::from_vector(adv, {n});
  return b;
}

PolicyLossInputs inputs_of(const Batch& b, const Tensor& logprobs, bool with_ref) {
  PolicyLossInputs in;
  in.logprobs = logprobs;
  in.old_logprobs = b.old_logprobs;
  in.ref_logprobs = with_ref ? b.ref_logprobs : Tensor();
  in.advantages = b.advantages;
  in.seq_offsets = b.offsets;
  in.total_sequences = static_cast<int64_t>(b.offsets.size()) - 1;
  in.total_tokens = b.offsets.back();
  return in;
}

PolicyLossConfig grpo(double kl) {
  return {0.2, 0.2, kl, LossAggregation::seq_mean_token_mean};
}
PolicyLossConfig dapo(double kl) {
  return {0.2, 0.28, kl, LossAggregation::token_mean};
}

OpCheck make_check(const std::string& label, const Batch& b, const PolicyLossConfig& cfg) {
  OpCheck c;
  c.ref.op = "policy_loss";
  c.ref.label = label;
  const bool kl = cfg.kl_coef > 0;
  c.ref.attrs = {
      {"epsilon_low", cfg.epsilon_low},
      {"epsilon_high", cfg.epsilon_high},
      {"kl_coef", cfg.kl_coef},
      {"aggregation",
       cfg.aggregation == LossAggregation::token_mean ? "token_mean" : "seq_mean_token_mean"},
      {"seq_offsets", b.offsets},
      {"total_sequences", static_cast<int64_t>(b.offsets.size()) - 1},
      {"total_tokens", b.offsets.back()}};
  c.ref.inputs = {{"logprobs", b.logprobs.clone()},
                  {"old_logprobs", b.old_logprobs},
                  {"advantages", b.advantages}};
  if (kl) c.ref.inputs.push_back({"ref_logprobs", b.ref_logprobs});
  c.ref.grad_of = {"logprobs"};
  c.fn = [b, cfg, kl](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{policy_loss(inputs_of(b, in[0], kl), cfg).loss};
  };
  c.tol = {1e-5, 1e-6};
  c.grad_tol = {1e-5, 1e-7};
  return c;
}

TEST(PolicyLoss, MatchesTorch) {
  std::vector<OpCheck> cs;
  const Batch hb = hand_batch();
  for (double kl : {0.0, 0.05}) {
    cs.push_back(make_check(fmt::format("hand GRPO kl={}", kl), hb, grpo(kl)));
    cs.push_back(make_check(fmt::format("hand DAPO kl={}", kl), hb, dapo(kl)));
  }
  for (uint64_t seed : {11u, 23u}) {
    const Batch rb = random_batch(6, seed * 10);
    cs.push_back(make_check(fmt::format("random GRPO seed {}", seed), rb, grpo(0.1)));
    cs.push_back(make_check(fmt::format("random DAPO seed {}", seed), rb, dapo(0.0)));
  }
  check_ops(cs, "rl_ref");
}

TEST(PolicyLoss, ClipStatsByHand) {
  const Batch b = hand_batch();
  // GRPO band [0.8, 1.2]: high-clipped tokens 0, 5, 10; low-clipped token 1.
  PolicyLossStats g = policy_loss(inputs_of(b, b.logprobs, false), grpo(0.0)).stats;
  EXPECT_EQ(g.tokens, 12);
  EXPECT_DOUBLE_EQ(g.clip_frac_high, 3.0 / 12);
  EXPECT_DOUBLE_EQ(g.clip_frac_low, 1.0 / 12);
  EXPECT_DOUBLE_EQ(g.clip_frac, 4.0 / 12);
  EXPECT_EQ(g.kl_mean, 0.0);
  // DAPO clip-higher [0.8, 1.28]: token 5 (r 1.246) is no longer clipped.
  PolicyLossStats d = policy_loss(inputs_of(b, b.logprobs, true), dapo(0.0)).stats;
  EXPECT_DOUBLE_EQ(d.clip_frac_high, 2.0 / 12);
  EXPECT_DOUBLE_EQ(d.clip_frac, 3.0 / 12);
  // ratio and k3 statistics against double arithmetic on the same f32 inputs
  const auto lp = b.logprobs.to_vector<float>(), old = b.old_logprobs.to_vector<float>(),
             ref = b.ref_logprobs.to_vector<float>();
  double rmean = 0, rmax = 0, kmean = 0;
  for (int t = 0; t < 12; ++t) {
    const double r = std::exp(static_cast<double>(lp[t]) - old[t]);
    const double x = static_cast<double>(ref[t]) - lp[t];
    rmean += r / 12, rmax = std::max(rmax, r), kmean += (std::exp(x) - x - 1) / 12;
  }
  EXPECT_NEAR(d.ratio_mean, rmean, 1e-6);
  EXPECT_NEAR(d.ratio_max, std::exp(0.5), 1e-6);
  EXPECT_NEAR(d.ratio_max, rmax, 1e-6);
  EXPECT_NEAR(d.kl_mean, kmean, 1e-7);
  EXPECT_GT(d.kl_mean, 0.0);
}

// The step's loss split into two microbatches with the whole-step normalisers: the
// losses add up, and every token's gradient has the same bits as in the full batch.
TEST(PolicyLoss, MicrobatchAdditivity) {
  for (int agg = 0; agg < 2; ++agg) {
    for (const Batch& b : {hand_batch(), random_batch(9, 77)}) {
      const PolicyLossConfig cfg = agg == 0 ? grpo(0.05) : dapo(0.05);
      Tensor full = b.logprobs.clone().requires_grad_();
      PolicyLossResult whole = policy_loss(inputs_of(b, full, true), cfg);
      whole.loss.backward();
      const int64_t S = static_cast<int64_t>(b.offsets.size()) - 1, N = b.offsets.back();
      const int64_t split = S / 2 + 1, cut = b.offsets[split];  // first part: sequences [0, split)
      double sum = 0;
      std::vector<float> grad;
      for (int part = 0; part < 2; ++part) {
        const int64_t t0 = part ? cut : 0, t1 = part ? N : cut;
        Batch h;
        h.logprobs = b.logprobs.narrow(0, t0, t1 - t0).clone();
        h.old_logprobs = b.old_logprobs.narrow(0, t0, t1 - t0).clone();
        h.ref_logprobs = b.ref_logprobs.narrow(0, t0, t1 - t0).clone();
        h.advantages = b.advantages.narrow(0, t0, t1 - t0).clone();
        const int64_t s0 = part ? split : 0, s1 = part ? S : split;
        for (int64_t s = s0; s <= s1; ++s) h.offsets.push_back(b.offsets[s] - t0);
        Tensor leaf = h.logprobs.clone().requires_grad_();
        PolicyLossInputs in = inputs_of(h, leaf, true);
        in.total_sequences = S;  // the whole step's normalisers
        in.total_tokens = N;
        PolicyLossResult r = policy_loss(in, cfg);
        r.loss.backward();
        sum += r.loss.item<double>();
        for (float g : leaf.grad().to_vector<float>()) grad.push_back(g);
      }
      const double want = whole.loss.item<double>();
      EXPECT_NEAR(sum, want, 1e-6 * std::max(1.0, std::fabs(want))) << "agg " << agg;
      const auto gfull = full.grad().to_vector<float>();
      ASSERT_EQ(grad.size(), gfull.size());
      EXPECT_EQ(std::memcmp(grad.data(), gfull.data(), grad.size() * 4), 0) << "agg " << agg;
    }
  }
}

// Hand-derived gradient of the GRPO loss without KL: -A r w on unclipped tokens, 0 on
// tokens whose clipped term is selected.
TEST(PolicyLoss, GradientZeroOnClippedTokens) {
  const Batch b = hand_batch();
  Tensor lp = b.logprobs.clone().requires_grad_();
  policy_loss(inputs_of(b, lp, false), grpo(0.0)).loss.backward();
  const auto g = lp.grad().to_vector<float>();
  const auto l = b.logprobs.to_vector<float>(), o = b.old_logprobs.to_vector<float>(),
             a = b.advantages.to_vector<float>();
  const double w[12] = {1.0 / 3,  1.0 / 12, 1.0 / 12, 1.0 / 12, 1.0 / 12, 1.0 / 21,
                        1.0 / 21, 1.0 / 21, 1.0 / 21, 1.0 / 21, 1.0 / 21, 1.0 / 21};
  for (int t = 0; t < 12; ++t) {
    const bool clipped = t == 0 || t == 1 || t == 5 || t == 10;
    const double want = clipped ? 0.0 : -a[t] * std::exp(static_cast<double>(l[t]) - o[t]) * w[t];
    EXPECT_NEAR(g[t], want, 1e-6) << "token " << t;
    if (clipped) {
      EXPECT_EQ(g[t], 0.0f) << "token " << t;
    }
  }
}

TEST(PolicyLoss, Errors) {
  const Batch b = hand_batch();
  auto expect_error = [&](PolicyLossInputs in, PolicyLossConfig cfg, const char* what) {
    try {
      policy_loss(in, cfg);
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("policy_loss"), std::string::npos) << e.what();
    }
  };
  PolicyLossInputs ok = inputs_of(b, b.logprobs, true);
  EXPECT_NO_THROW(policy_loss(ok, grpo(0.1)));
  PolicyLossInputs in = ok;
  in.advantages = Tensor::zeros({11});
  expect_error(in, grpo(0.0), "advantages");
  in = ok, in.old_logprobs = Tensor();
  expect_error(in, grpo(0.0), "old_logprobs");
  in = ok, in.logprobs = Tensor::zeros({12}, DType::bf16);
  expect_error(in, grpo(0.0), "logprobs");
  in = ok, in.ref_logprobs = Tensor();
  expect_error(in, grpo(0.1), "ref_logprobs");
  in = ok, in.seq_offsets = {0, 1, 5, 11};
  expect_error(in, grpo(0.0), "seq_offsets");
  in = ok, in.seq_offsets = {0, 5, 5, 12};
  expect_error(in, grpo(0.0), "seq_offsets");
  in = ok, in.seq_offsets = {1, 5, 12};
  expect_error(in, grpo(0.0), "seq_offsets");
  in = ok, in.total_sequences = 0;
  expect_error(in, grpo(0.0), "total_sequences");
  EXPECT_NO_THROW(policy_loss(in, dapo(0.0)));  // the other normaliser is not used
  in = ok, in.total_tokens = 0;
  expect_error(in, dapo(0.0), "total_tokens");
  expect_error(ok, PolicyLossConfig{1.0, 0.2, 0.0, LossAggregation::token_mean}, "epsilon_low");
  expect_error(ok, PolicyLossConfig{0.2, -0.1, 0.0, LossAggregation::token_mean}, "epsilon_high");
  expect_error(ok, PolicyLossConfig{0.2, 0.2, -1.0, LossAggregation::token_mean}, "kl_coef");
}

}  // namespace
}  // namespace titan::rl
