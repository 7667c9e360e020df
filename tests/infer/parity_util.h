// Generator/trainer parity harness shared by the hybrid and the attention-variant
// parity tests: a prompt set (prefix sharing, n > 1, seeded and greedy sampling), the
// engine run, and the trainer's logprobs of the same completions (prompt + completion
// packed in reverse order, autograd on, Decoder::logprobs on the rows that predict each
// completion token).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "infer_test_util.h"
#include "titan/ops/loss.h"

namespace titan::infer::testing {

struct Case {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;
};

inline SamplingParams sp(double t, std::optional<uint64_t> seed, int n = 1, int max_tokens = 24) {
  SamplingParams p;
  p.temperature = t;
  p.seed = seed;
  p.n = n;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

inline Case make_case() {
  Case c;
  const std::vector<int32_t> base = random_tokens(80, 11);
  auto cat = [](std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  c.prompts = {
      random_tokens(5, 1),
      random_tokens(31, 2),
      random_tokens(33, 3),
      std::vector<int32_t>(base.begin(), base.begin() + 70),                              // 2 full blocks
      cat(std::vector<int32_t>(base.begin(), base.begin() + 64), random_tokens(9, 4)),   // shares 2 blocks
      cat(std::vector<int32_t>(base.begin(), base.begin() + 40), random_tokens(30, 5)),  // shares 1 block
      random_tokens(100, 6),
  };
  c.params = {sp(0.0, {}), sp(0.8, 7), sp(1.0, 8), sp(0.7, 9, 3), sp(1.2, {}), sp(0.0, 5), sp(0.9, 10, 1, 40)};
  return c;
}

inline EngineConfig base_config() {
  EngineConfig ec;
  ec.kv_cache_bytes = 8 << 20;
  ec.max_num_seqs = 16;
  ec.seed = 1234;
  return ec;
}

inline Result run_all_at_once(const models::Decoder& m, const Case& c, EngineConfig ec, EngineStats* stats = nullptr,
                       std::vector<int64_t>* cached = nullptr) {
  Engine e(m, nullptr, ec);
  auto outs = e.generate(c.prompts, c.params);
  if (stats) *stats = e.stats();
  if (cached)
    for (const auto& o : outs) cached->push_back(o.metrics.num_cached_tokens);
  EXPECT_EQ(e.block_pool().num_free(), e.block_pool().num_blocks());
  EXPECT_EQ(e.state_pool().num_free_seq_slots(), e.state_pool().num_seq_slots());
  return flatten(outs);
}

// Trainer side: prompt + completion of every sample packed in reverse order, autograd on,
// Decoder::logprobs (titan::logprobs) on the rows that predict each completion token.
inline std::vector<std::vector<float>> trainer_logprobs(const models::Decoder& m, const Case& c, const Result& r) {
  std::vector<std::vector<int32_t>> docs;
  std::vector<size_t> prompt_of;
  for (size_t i = 0; i < c.prompts.size(); ++i)
    for (int s = 0; s < c.params[i].n; ++s) {
      std::vector<int32_t> d = c.prompts[i];
      d.insert(d.end(), r.tokens[docs.size()].begin(), r.tokens[docs.size()].end());
      docs.push_back(d);
      prompt_of.push_back(i);
    }
  std::vector<std::vector<int32_t>> packed(docs.rbegin(), docs.rend());
  models::ForwardBatch fb = models::make_packed_batch(packed);
  Tensor hidden = m.forward(fb);
  EXPECT_TRUE(hidden.requires_grad());
  std::vector<std::vector<float>> out(docs.size());
  int64_t start = 0;
  for (size_t k = 0; k < docs.size(); ++k) {
    const size_t i = docs.size() - 1 - k;
    const int64_t P = static_cast<int64_t>(c.prompts[prompt_of[i]].size());
    const int64_t n = static_cast<int64_t>(r.tokens[i].size());
    Tensor rows = hidden.narrow(0, start + P - 1, n);
    out[i] = m.logprobs(rows, Tensor::from_vector(r.tokens[i], {n}), c.params[prompt_of[i]].logprob_temperature())
                 .to_vector<float>();
    start += static_cast<int64_t>(docs[i].size());
  }
  return out;
}

inline double max_abs_diff(const Result& r, const std::vector<std::vector<float>>& t) {
  double d = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_EQ(r.logprobs[i].size(), t[i].size());
    for (size_t j = 0; j < t[i].size() && j < r.logprobs[i].size(); ++j)
      d = std::max(d, std::fabs(static_cast<double>(r.logprobs[i][j]) - t[i][j]));
  }
  return d;
}

}  // namespace titan::infer::testing
