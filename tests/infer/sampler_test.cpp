// The sampler against exact (double) distributions, its Philox keying, top-N logprobs
// against a double log-softmax, and the block pool's bookkeeping.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "titan/core/error.h"
#include "titan/infer/block_pool.h"
#include "titan/infer/sampler.h"
#include "titan/kernels/cpu/softmax.h"

using namespace titan;
using namespace titan::infer;

namespace {

// Exact sampling distribution of the filters (double), the definition in sampler.h.
std::vector<double> reference_probs(const std::vector<float>& x, const SamplingParams& sp) {
  const size_t V = x.size();
  std::vector<double> p(V);
  double mx = -INFINITY, z = 0;
  for (float v : x) mx = std::max(mx, static_cast<double>(v) / sp.temperature);
  for (size_t j = 0; j < V; ++j) z += p[j] = std::exp(x[j] / sp.temperature - mx);
  for (auto& v : p) v /= z;
  std::vector<bool> keep(V, true);
  const double pmax = *std::max_element(p.begin(), p.end());
  if (sp.min_p > 0)
    for (size_t j = 0; j < V; ++j) keep[j] = p[j] >= sp.min_p * pmax;
  std::vector<size_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
  if (sp.top_k > 0) {
    int seen = 0;
    for (size_t j : order)
      if (keep[j] && ++seen > sp.top_k) keep[j] = false;
  }
  if (sp.top_p < 1) {
    double mass = 0, cum = 0;
    for (size_t j = 0; j < V; ++j)
      if (keep[j]) mass += p[j];
    bool reached = false;
    for (size_t j : order) {
      if (!keep[j]) continue;
      if (reached) keep[j] = false;
      cum += p[j];
      if (cum >= sp.top_p * mass) reached = true;
    }
  }
  double kept = 0;
  for (size_t j = 0; j < V; ++j) kept += keep[j] ? p[j] : 0;
  for (size_t j = 0; j < V; ++j) p[j] = keep[j] ? p[j] / kept : 0;
  return p;
}

void check_distribution(const SamplingParams& sp) {
  const std::vector<float> x = {1.0f, 2.5f, 0.3f, 2.5f, -1.0f, 1.7f, 0.9f, 2.2f, -3.0f, 1.1f};
  const std::vector<double> ref = reference_probs(x, sp);
  const int N = 40000;
  std::vector<int> count(x.size(), 0);
  SamplerScratch s;
  for (int i = 0; i < N; ++i) ++count[sample_token(x.data(), static_cast<int64_t>(x.size()), sp, 99, 0, i, s)];
  for (size_t j = 0; j < x.size(); ++j) {
    const double f = static_cast<double>(count[j]) / N;
    // 5 standard deviations of a binomial proportion.
    const double tol = 5 * std::sqrt(std::max(ref[j] * (1 - ref[j]), 1e-12) / N) + 1e-9;
    EXPECT_NEAR(f, ref[j], tol) << "token " << j << " T=" << sp.temperature << " top_p=" << sp.top_p
                                << " top_k=" << sp.top_k << " min_p=" << sp.min_p;
    if (ref[j] == 0) {
      EXPECT_EQ(count[j], 0) << "filtered token " << j << " was sampled";
    }
  }
}

SamplingParams make(double t, double top_p = 1, int top_k = 0, double min_p = 0) {
  SamplingParams p;
  p.temperature = t;
  p.top_p = top_p;
  p.top_k = top_k;
  p.min_p = min_p;
  return p;
}

TEST(Sampler, MatchesExactDistributions) {
  check_distribution(make(1.0));
  check_distribution(make(0.5));
  check_distribution(make(1.7, 1, 3));
  check_distribution(make(1.0, 0.6));
  check_distribution(make(1.0, 0.9, 4));
  check_distribution(make(0.8, 1, 0, 0.3));
  check_distribution(make(1.3, 0.7, 6, 0.1));
}

// Running sums r_i of sampler.h: double sums in blocks of 64 (in order inside a block),
// plus the previous blocks' totals summed in order.
std::vector<double> running_sums(const std::vector<float>& v) {
  std::vector<double> r(v.size());
  double A = 0;
  for (size_t b = 0; b < v.size(); b += 64) {
    double s = 0;
    for (size_t i = b; i < std::min(v.size(), b + 64); ++i) r[i] = A + (s += v[i]);
    A += s;
  }
  return r;
}

// The nucleus of a flat row (thousands of tokens, so the radix full sort runs) with
// tied probabilities: sample_token must draw exactly as the definition in sampler.h,
// written here with std::stable_sort and plain loops.
TEST(Sampler, TopPOnFlatRowsFollowsTheDefinitionExactly) {
  const int64_t V = 6000;
  std::vector<float> x(V);
  for (int64_t j = 0; j < V; ++j) x[j] = static_cast<float>(std::round(std::sin(j * 0.7) * 40) / 100);  // ties
  for (double top_p : {0.95, 0.5, 0.02, 1.0}) {
    const SamplingParams sp = make(0.8, top_p);
    const float inv_t = static_cast<float>(1.0 / sp.temperature);
    std::vector<float> z(V), p(V);
    for (int64_t j = 0; j < V; ++j) z[j] = x[j] * inv_t;
    kernels::cpu::softmax_fwd(p.data(), z.data(), 1, V);
    std::vector<int32_t> order(V);
    std::iota(order.begin(), order.end(), 0);
    if (top_p < 1) std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
    std::vector<float> sorted(V);
    for (int64_t i = 0; i < V; ++i) sorted[i] = p[order[i]];
    const std::vector<double> r = running_sums(sorted);
    int64_t cut = V;
    if (top_p < 1) {
      const double goal = top_p * running_sums(p).back();
      for (int64_t i = 0; i < V; ++i)
        if (r[i] >= goal) {
          cut = i + 1;
          break;
        }
    }
    SamplerScratch s;
    for (int pos = 0; pos < 300; ++pos) {
      const double target = philox_uniform(4, pos, 0) * r[cut - 1];
      int32_t want = order[cut - 1];
      for (int64_t i = 0; i < cut; ++i)
        if (r[i] > target) {
          want = order[i];
          break;
        }
      ASSERT_EQ(sample_token(x.data(), V, sp, 4, 0, pos, s), want) << "top_p " << top_p << " position " << pos;
    }
  }
}

TEST(Sampler, GreedyIsArgmaxWithTiesToLowerId) {
  const std::vector<float> x = {0.1f, 3.0f, -2.0f, 3.0f, 2.9f};
  SamplerScratch s;
  EXPECT_EQ(sample_token(x.data(), 5, make(0.0), 1, 0, 0, s), 1);
  EXPECT_EQ(argmax(x.data(), 5), 1);
  // top_k = 1 at any temperature is greedy too.
  for (int pos = 0; pos < 50; ++pos) EXPECT_EQ(sample_token(x.data(), 5, make(2.0, 1, 1), 7, 0, pos, s), 1);
}

TEST(Sampler, KeyedBySeedSampleIndexAndPositionOnly) {
  std::vector<float> x(1000);
  for (size_t j = 0; j < x.size(); ++j) x[j] = static_cast<float>(std::sin(j * 0.37) * 2);
  SamplerScratch s1, s2;
  const SamplingParams p = make(1.0, 0.95, 100);
  int differ_idx = 0, differ_seed = 0;
  for (int pos = 0; pos < 200; ++pos) {
    const int32_t a = sample_token(x.data(), 1000, p, 5, 0, pos, s1);
    EXPECT_EQ(a, sample_token(x.data(), 1000, p, 5, 0, pos, s2));  // same key, fresh scratch
    differ_idx += a != sample_token(x.data(), 1000, p, 5, 1, pos, s1);
    differ_seed += a != sample_token(x.data(), 1000, p, 6, 0, pos, s1);
  }
  EXPECT_GT(differ_idx, 100);
  EXPECT_GT(differ_seed, 100);
  EXPECT_NE(derive_request_seed(0, 1), derive_request_seed(0, 2));
  EXPECT_NE(derive_request_seed(0, 1), derive_request_seed(1, 1));
  const double u = philox_uniform(1, 2, 3);
  EXPECT_GE(u, 0.0);
  EXPECT_LT(u, 1.0);
}

TEST(Sampler, TopLogprobsMatchDoubleLogSoftmaxAndTheLogprobFunction) {
  std::vector<float> x(5000);
  for (size_t j = 0; j < x.size(); ++j) x[j] = static_cast<float>(std::cos(j * 1.3) * 4);
  for (double t : {1.0, 0.7}) {
    const TopLogprobs top = top_logprobs(x.data(), 5000, t, 5);
    ASSERT_EQ(top.size(), 5u);
    double mx = -INFINITY, z = 0;
    for (float v : x) mx = std::max(mx, v / t);
    for (float v : x) z += std::exp(v / t - mx);
    for (size_t i = 0; i < top.size(); ++i) {
      if (i) {
        EXPECT_GE(x[top[i - 1].first], x[top[i].first]);
      }
      EXPECT_NEAR(top[i].second, x[top[i].first] / t - mx - std::log(z), 2e-5);
      float lp;
      const int64_t tgt = top[i].first;
      kernels::cpu::logprobs_from_logits(&lp, nullptr, x.data(), &tgt, 1, 5000, static_cast<float>(1.0 / t));
      EXPECT_EQ(std::memcmp(&lp, &top[i].second, 4), 0) << "bits of token " << tgt;
    }
  }
}

TEST(Sampler, ParamsValidation) {
  auto msg = [](SamplingParams p) {
    try {
      p.validate();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  SamplingParams p;
  EXPECT_EQ(msg(p), "");
  p.top_p = 0;
  EXPECT_EQ(msg(p), "SamplingParams.top_p must be in (0, 1], got 0");
  p.top_p = 1.5;
  EXPECT_EQ(msg(p), "SamplingParams.top_p must be in (0, 1], got 1.5");
  p = {};
  p.max_tokens = 0;
  EXPECT_EQ(msg(p), "SamplingParams.max_tokens must be >= 1, got 0");
  p = {};
  p.temperature = -1;
  EXPECT_EQ(msg(p), "SamplingParams.temperature must be finite and >= 0, got -1");
  p = {};
  p.n = 0;
  EXPECT_EQ(msg(p), "SamplingParams.n must be in [1, 4096], got 0");
  p = {};
  p.min_p = 2;
  EXPECT_EQ(msg(p), "SamplingParams.min_p must be in [0, 1], got 2");
}

TEST(BlockPool, AllocateReleaseRefcountsAndLru) {
  BlockPool pool(4, 16);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(pool.allocate(3, a));
  EXPECT_EQ(a, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_FALSE(pool.allocate(2, b));  // all or nothing
  EXPECT_TRUE(b.empty());
  pool.acquire(a[0]);
  EXPECT_EQ(pool.ref_count(a[0]), 2);
  pool.release(a);
  EXPECT_EQ(pool.ref_count(a[0]), 1);
  EXPECT_EQ(pool.num_free(), 3);
  // Released last block first: 3 was never used (head), then 2, then 1.
  ASSERT_TRUE(pool.allocate(3, b));
  EXPECT_EQ(b, (std::vector<int32_t>{3, 2, 1}));
  pool.release(b);
  pool.release(std::vector<int32_t>{a[0]});
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_THROW(pool.release(std::vector<int32_t>{0}), Error);
}

TEST(BlockPool, PrefixTableLookupEvictionAndVerification) {
  BlockPool pool(2, 16);
  std::vector<int32_t> toks(16), other(16);
  std::iota(toks.begin(), toks.end(), 5);
  std::iota(other.begin(), other.end(), 6);
  const uint64_t h = block_hash(0, 0, toks);
  EXPECT_NE(h, block_hash(0, 1, toks));  // salt
  EXPECT_NE(h, block_hash(7, 0, toks));  // parent
  EXPECT_NE(h, block_hash(0, 0, other));
  std::vector<int32_t> blk;
  ASSERT_TRUE(pool.allocate(1, blk));
  pool.register_block(blk[0], h, 0, toks);
  EXPECT_EQ(pool.num_cached(), 1);
  pool.release(blk);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.lookup(h, 0, toks), blk[0]);  // cached while free
  EXPECT_EQ(pool.lookup(h, 0, other), -1);     // verified against the tokens
  EXPECT_EQ(pool.lookup(h, 3, toks), -1);      // and the parent
  pool.acquire(blk[0]);
  EXPECT_EQ(pool.num_free(), 1);
  pool.release(blk);
  std::vector<int32_t> two;
  ASSERT_TRUE(pool.allocate(2, two));  // evicts the cached block
  EXPECT_EQ(pool.num_cached(), 0);
  EXPECT_EQ(pool.lookup(h, 0, toks), -1);
  pool.release(two);
}

}  // namespace
