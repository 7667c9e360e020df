// Softmax-family kernels and the vocabulary log-sum-exp algorithm: double references,
// finite differences, the chunk/merge contract, and bitwise batch invariance.
#include <gtest/gtest.h>

#include <limits>

#include "rows_test_util.h"
#include "titan/core/error.h"
#include "titan/kernels/cpu/softmax.h"

namespace titan::kernels::cpu {
namespace {
using test::expect_close;
using test::randn;

const int64_t kSizes[] = {1, 3, 15, 16, 17, 63, 257, 1000, 3 * kVocabChunk + 5};

std::vector<double> lse_ref(const std::vector<float>& x, int64_t T, int64_t V, double it = 1.0) {
  std::vector<double> out(T);
  for (int64_t t = 0; t < T; ++t) {
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < V; ++j) m = std::max(m, x[t * V + j] * it);
    for (int64_t j = 0; j < V; ++j) s += std::exp(x[t * V + j] * it - m);
    out[t] = m + std::log(s);
  }
  return out;
}

TEST(Softmax, ForwardMatchesDouble) {
  for (int64_t V : kSizes) {
    const int64_t T = 3;
    auto x = randn(T * V, 100 + V, 4.0f);
    const auto l = lse_ref(x, T, V);
    std::vector<double> rp(T * V), rlp(T * V);
    for (int64_t i = 0; i < T * V; ++i) {
      rlp[i] = x[i] - l[i / V];
      rp[i] = std::exp(rlp[i]);
    }
    std::vector<float> p(T * V), lp(T * V), lse(T), lse2(T);
    softmax_fwd(p.data(), x.data(), T, V);
    log_softmax_fwd(lp.data(), lse.data(), x.data(), T, V);
    logsumexp_fwd(lse2.data(), x.data(), T, V);
    expect_close(p, rp, 1e-5, 1e-9, "softmax");
    expect_close(lp, rlp, 1e-5, 2e-6, "log_softmax");
    expect_close(lse, l, 1e-6, 1e-6, "log_softmax lse");
    EXPECT_TRUE(test::same_bits(lse.data(), lse2.data(), T)) << "logsumexp_fwd vs log_softmax lse";
  }
}

TEST(Softmax, BackwardMatchesDoubleAndFiniteDifferences) {
  for (int64_t V : {int64_t(1), int64_t(3), int64_t(17), int64_t(257), int64_t(1000)}) {
    const int64_t T = 2;
    auto x = randn(T * V, 200 + V, 2.0f), dout = randn(T * V, 300 + V);
    std::vector<float> p(T * V), lp(T * V), dxs(T * V), dxl(T * V);
    softmax_fwd(p.data(), x.data(), T, V);
    log_softmax_fwd(lp.data(), nullptr, x.data(), T, V);
    softmax_bwd(dxs.data(), dout.data(), p.data(), T, V);
    log_softmax_bwd(dxl.data(), dout.data(), lp.data(), T, V);
    // Finite differences of L = Σ dout ⊙ f(x) in double, f = softmax / log_softmax.
    auto loss = [&](const std::vector<double>& xd, bool log) {
      double L = 0;
      for (int64_t t = 0; t < T; ++t) {
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < V; ++j) m = std::max(m, xd[t * V + j]);
        for (int64_t j = 0; j < V; ++j) s += std::exp(xd[t * V + j] - m);
        for (int64_t j = 0; j < V; ++j) {
          const double l = xd[t * V + j] - m - std::log(s);
          L += dout[t * V + j] * (log ? l : std::exp(l));
        }
      }
      return L;
    };
    auto xd = test::to_double(x);
    // Every element for short rows, a strided subset (with both row ends) for long ones.
    std::vector<int64_t> idx;
    const int64_t step = V <= 64 ? 1 : 37;
    for (int64_t i = 0; i < T * V; i += step) idx.push_back(i);
    idx.push_back(T * V - 1);
    std::vector<float> gs, gl;
    std::vector<double> fs, fl;
    for (int64_t i : idx) {
      gs.push_back(dxs[i]);
      gl.push_back(dxl[i]);
      const double h = 1e-6, keep = xd[i];
      xd[i] = keep + h;
      const double sp = loss(xd, false), lpv = loss(xd, true);
      xd[i] = keep - h;
      fs.push_back((sp - loss(xd, false)) / (2 * h));
      fl.push_back((lpv - loss(xd, true)) / (2 * h));
      xd[i] = keep;
    }
    expect_close(gs, fs, 1e-4, 1e-5, "softmax_bwd");
    expect_close(gl, fl, 1e-4, 1e-5, "log_softmax_bwd");
  }
}

TEST(VocabLse, RowStatsAreTheChunkMergeInAscendingOrder) {
  const int64_t V = 3 * kVocabChunk + 77;
  auto x = randn(V, 5, 3.0f);
  const float it = 1.0f / 0.7f;
  VocabStats acc = vocab_chunk_stats(x.data(), kVocabChunk, it);
  for (int64_t c0 = kVocabChunk; c0 < V; c0 += kVocabChunk)
    acc = merge_chunk_stats(acc, vocab_chunk_stats(x.data() + c0, std::min(kVocabChunk, V - c0), it));
  const VocabStats row = vocab_row_stats(x.data(), V, it);
  EXPECT_TRUE(test::same_bits(&acc.max, &row.max, 1) && test::same_bits(&acc.sum, &row.sum, 1));
  EXPECT_NEAR(vocab_lse(row), lse_ref(x, 1, V, static_cast<double>(it))[0], 2e-6);
  // A chunk of −inf (masked vocabulary padding) contributes nothing.
  std::vector<float> y(2 * kVocabChunk, -std::numeric_limits<float>::infinity());
  y[5] = 1.0f;
  y[6] = 2.0f;
  const VocabStats s = vocab_row_stats(y.data(), 2 * kVocabChunk, 1.0f);
  EXPECT_NEAR(vocab_lse(s), std::log(std::exp(1.0) + std::exp(2.0)), 1e-6);
  EXPECT_THROW(vocab_chunk_stats(x.data(), kVocabChunk + 1, 1.0f), titan::Error);
}

TEST(LogprobsFromLogits, MatchesDoubleAndLogSoftmaxBits) {
  for (int64_t V : kSizes) {
    const int64_t T = 4;
    auto x = randn(T * V, 400 + V, 3.0f);
    std::vector<int64_t> y(T);
    std::vector<int32_t> y32(T);
    for (int64_t t = 0; t < T; ++t) y32[t] = static_cast<int32_t>(y[t] = (t * 7919 + 3) % V);
    for (float temp : {1.0f, 0.6f, 1.3f}) {
      const float it = 1.0f / temp;
      std::vector<float> lp(T), lse(T), lp32(T);
      logprobs_from_logits(lp.data(), lse.data(), x.data(), y.data(), T, V, it);
      logprobs_from_logits(lp32.data(), nullptr, x.data(), y32.data(), T, V, it);
      EXPECT_TRUE(test::same_bits(lp.data(), lp32.data(), T)) << "int32 vs int64 targets";
      const auto l = lse_ref(x, T, V, it);
      std::vector<double> rlp(T);
      for (int64_t t = 0; t < T; ++t) rlp[t] = x[t * V + y[t]] * static_cast<double>(it) - l[t];
      expect_close(lp, rlp, 1e-5, 3e-6, "logprobs");
      expect_close(lse, l, 1e-6, 1e-6, "lse");
    }
    // With inv_temperature = 1: exactly log_softmax_fwd gathered at the targets.
    std::vector<float> lp(T), lsm(T * V), lse(T), lse2(T);
    logprobs_from_logits(lp.data(), lse.data(), x.data(), y.data(), T, V, 1.0f);
    log_softmax_fwd(lsm.data(), lse2.data(), x.data(), T, V);
    for (int64_t t = 0; t < T; ++t)
      EXPECT_TRUE(test::same_bits(&lp[t], &lsm[t * V + y[t]], 1)) << "V=" << V << " t=" << t;
    EXPECT_TRUE(test::same_bits(lse.data(), lse2.data(), T));
  }
}

TEST(LogprobsFromLogits, RejectsBadTargetsAndTemperature) {
  std::vector<float> x(10), lp(1);
  int64_t bad = 10;
  try {
    logprobs_from_logits(lp.data(), nullptr, x.data(), &bad, 1, 10, 1.0f);
    FAIL();
  } catch (const titan::Error& e) {
    EXPECT_NE(std::string(e.what()).find("logprobs_from_logits: targets[0] = 10 is outside [0, V = 10)"),
              std::string::npos)
        << e.what();
  }
  int64_t ok = 3;
  EXPECT_THROW(logprobs_from_logits(lp.data(), nullptr, x.data(), &ok, 1, 10, 0.0f), titan::Error);
}

TEST(RowInvariance, LogSoftmaxAndLogprobs) {
  for (int64_t V : {int64_t(1000), kVocabChunk + 100}) {
    const int64_t N = 257;
    auto x = randn(N * V, 500 + V, 3.0f);
    std::vector<int64_t> y(N);
    for (int64_t t = 0; t < N; ++t) y[t] = (t * 104729) % V;
    test::expect_batch_invariant(N, V, [&](const std::vector<int64_t>& rows, std::vector<float>& out) {
      auto xb = test::gather_rows(x, V, rows);
      log_softmax_fwd(out.data(), nullptr, xb.data(), static_cast<int64_t>(rows.size()), V);
    }, "log_softmax_fwd");
    test::expect_batch_invariant(N, 2, [&](const std::vector<int64_t>& rows, std::vector<float>& out) {
      const int64_t B = static_cast<int64_t>(rows.size());
      auto xb = test::gather_rows(x, V, rows);
      std::vector<int64_t> yb(B);
      for (int64_t j = 0; j < B; ++j) yb[j] = y[rows[j]];
      std::vector<float> lp(B), lse(B);
      logprobs_from_logits(lp.data(), lse.data(), xb.data(), yb.data(), B, V, 1.0f / 0.8f);
      for (int64_t j = 0; j < B; ++j) {
        out[2 * j] = lp[j];
        out[2 * j + 1] = lse[j];
      }
    }, "logprobs_from_logits");
  }
}

}  // namespace
}  // namespace titan::kernels::cpu
