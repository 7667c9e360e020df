// Fused chunked cross-entropy: double references, finite differences, the bitwise
// contract with gemm_f32 + logprobs_from_logits, batch invariance and determinism.
#include <gtest/gtest.h>

#include "rows_test_util.h"
#include "titan/core/error.h"
#include "titan/kernels/cpu/gemm.h"
#include "titan/kernels/cpu/loss.h"
#include "titan/kernels/cpu/softmax.h"

namespace titan::kernels::cpu {
namespace {
using test::expect_close;
using test::randn;

constexpr int64_t kIgnore = -100;

struct Problem {
  int64_t T, D, V;
  std::vector<float> h, w;
  std::vector<int64_t> y;
};
Problem make(int64_t T, int64_t D, int64_t V, uint32_t seed, bool with_ignored) {
  Problem p{T, D, V, randn(T * D, seed, 1.0f), randn(V * D, seed + 1, 0.5f), std::vector<int64_t>(T)};
  for (int64_t t = 0; t < T; ++t) p.y[t] = (t * 7919 + 11 * seed) % V;
  if (with_ignored)
    for (int64_t t = 2; t < T; t += 3) p.y[t] = kIgnore;
  return p;
}

// Double reference: per-row loss and lse, and the gradients of Σ_t dloss[t]·loss[t].
struct Ref {
  std::vector<double> loss, lse, dh, dw;
};
Ref ce_ref(const Problem& p, const std::vector<double>& h, const std::vector<double>& w,
           const std::vector<float>& dloss, double zc, double it) {
  const int64_t T = p.T, D = p.D, V = p.V;
  Ref r{std::vector<double>(T), std::vector<double>(T), std::vector<double>(T * D, 0.0),
        std::vector<double>(V * D, 0.0)};
  std::vector<double> z(V);
  for (int64_t t = 0; t < T; ++t) {
    double m = -INFINITY, s = 0;
    for (int64_t v = 0; v < V; ++v) {
      double a = 0;
      for (int64_t k = 0; k < D; ++k) a += h[t * D + k] * w[v * D + k];
      z[v] = a * it;
      m = std::max(m, z[v]);
    }
    for (int64_t v = 0; v < V; ++v) s += std::exp(z[v] - m);
    const double lse = m + std::log(s);
    r.lse[t] = lse;
    if (p.y[t] == kIgnore) continue;
    r.loss[t] = lse - z[p.y[t]] + zc * lse * lse;
    for (int64_t v = 0; v < V; ++v) {
      const double g = dloss[t] * it * (std::exp(z[v] - lse) * (1 + 2 * zc * lse) - (v == p.y[t]));
      for (int64_t k = 0; k < D; ++k) {
        r.dh[t * D + k] += g * w[v * D + k];
        r.dw[v * D + k] += g * h[t * D + k];
      }
    }
  }
  return r;
}

TEST(CrossEntropy, ForwardMatchesDouble) {
  Problem p = make(9, 17, 2 * kVocabChunk + 37, 3, true);
  for (float temp : {1.0f, 0.7f})
    for (float zc : {0.0f, 1e-3f}) {
      std::vector<float> loss(p.T), lse(p.T), dl(p.T, 1.0f);
      cross_entropy_fwd(loss.data(), lse.data(), p.h.data(), p.w.data(), p.y.data(), p.T, p.D, p.V,
                        kIgnore, zc, 1.0f / temp);
      const Ref r = ce_ref(p, test::to_double(p.h), test::to_double(p.w), dl, zc, 1.0 / temp);
      expect_close(loss, r.loss, 1e-5, 1e-5, "loss");
      expect_close(lse, r.lse, 1e-5, 1e-5, "lse");
      for (int64_t t = 2; t < p.T; t += 3) EXPECT_EQ(loss[t], 0.0f) << "ignored row " << t;
    }
}

TEST(CrossEntropy, BackwardMatchesDoubleAndFiniteDifferences) {
  Problem p = make(7, 13, kVocabChunk + 37, 5, true);
  const float zc = 2e-3f, it = 1.0f / 0.8f;
  auto dl = randn(p.T, 9);
  std::vector<float> loss(p.T), lse(p.T), dh(p.T * p.D), dw(p.V * p.D);
  cross_entropy_fwd(loss.data(), lse.data(), p.h.data(), p.w.data(), p.y.data(), p.T, p.D, p.V,
                    kIgnore, zc, it);
  cross_entropy_bwd(dh.data(), dw.data(), dl.data(), p.h.data(), p.w.data(), p.y.data(), lse.data(),
                    p.T, p.D, p.V, kIgnore, zc, it, false);
  auto hd = test::to_double(p.h), wd = test::to_double(p.w);
  const Ref r = ce_ref(p, hd, wd, dl, zc, it);
  expect_close(dh, r.dh, 1e-4, 1e-6, "dhidden");
  expect_close(dw, r.dw, 1e-4, 1e-6, "dweight");
  for (int64_t t = 2; t < p.T; t += 3)
    for (int64_t k = 0; k < p.D; ++k) EXPECT_EQ(dh[t * p.D + k], 0.0f) << "ignored row " << t;
  // The reference gradient against central differences of Σ dloss · loss (double).
  auto total = [&] {
    const Ref q = ce_ref(p, hd, wd, dl, zc, it);
    double s = 0;
    for (int64_t t = 0; t < p.T; ++t) s += dl[t] * q.loss[t];
    return s;
  };
  const double step = 1e-6;
  for (auto [vec, grad, idx] : {std::tuple{&hd, &r.dh, int64_t(3)}, std::tuple{&hd, &r.dh, p.T * p.D - 1},
                                std::tuple{&wd, &r.dw, p.y[0] * p.D + 4}, std::tuple{&wd, &r.dw, int64_t(5)}}) {
    const double keep = (*vec)[idx];
    (*vec)[idx] = keep + step;
    const double lp = total();
    (*vec)[idx] = keep - step;
    const double lm = total();
    (*vec)[idx] = keep;
    EXPECT_NEAR((*grad)[idx], (lp - lm) / (2 * step), 1e-6 * (1 + std::abs((*grad)[idx])));
  }
  // accumulate_dweight adds onto the existing values
  std::vector<float> dw2(p.V * p.D, 0.5f);
  cross_entropy_bwd(nullptr, dw2.data(), dl.data(), p.h.data(), p.w.data(), p.y.data(), lse.data(),
                    p.T, p.D, p.V, kIgnore, zc, it, true);
  std::vector<double> want(p.V * p.D);
  for (size_t i = 0; i < want.size(); ++i) want[i] = 0.5 + r.dw[i];
  expect_close(dw2, want, 1e-4, 1e-6, "dweight accumulated");
}

// The contract of DESIGN.md §1.2: the fused path gives the bits of full gemm_f32 logits
// followed by THE logprob function, for logprobs, lse and loss alike.
TEST(CrossEntropy, FusedChunkPathHasGemmPlusLogprobsBits) {
  const Problem p = make(kCeRowTile + 44, 24, 2 * kVocabChunk + 5, 7, false);  // 2 row tiles, 3 chunks
  std::vector<float> logits(p.T * p.V);
  gemm_f32(p.T, p.V, p.D, p.h.data(), p.D, p.w.data(), p.D, true, logits.data(), p.V, false);
  for (float it : {1.0f, 1.0f / 0.6f}) {
    std::vector<float> lp_ref(p.T), lse_ref(p.T);
    logprobs_from_logits(lp_ref.data(), lse_ref.data(), logits.data(), p.y.data(), p.T, p.V, it);
    std::vector<float> lp(p.T), lse(p.T), loss(p.T), lse2(p.T);
    logprobs_from_hidden(lp.data(), lse.data(), p.h.data(), p.w.data(), p.y.data(), p.T, p.D, p.V, it);
    EXPECT_TRUE(test::same_bits(lp.data(), lp_ref.data(), p.T)) << "logprobs_from_hidden";
    EXPECT_TRUE(test::same_bits(lse.data(), lse_ref.data(), p.T)) << "lse";
    cross_entropy_fwd(loss.data(), lse2.data(), p.h.data(), p.w.data(), p.y.data(), p.T, p.D, p.V,
                      kIgnore, 0.0f, it);
    for (int64_t t = 0; t < p.T; ++t) {
      const float neg = -lp_ref[t];
      ASSERT_TRUE(test::same_bits(&loss[t], &neg, 1)) << "loss != -logprob at row " << t;
    }
    EXPECT_TRUE(test::same_bits(lse2.data(), lse_ref.data(), p.T));
    // the composed twin over materialised logits
    std::vector<float> loss3(p.T), lse3(p.T);
    cross_entropy_logits_fwd(loss3.data(), lse3.data(), logits.data(), p.y.data(), p.T, p.V,
                             kIgnore, 0.0f, it);
    EXPECT_TRUE(test::same_bits(loss3.data(), loss.data(), p.T));
    std::vector<int32_t> y32(p.y.begin(), p.y.end());
    std::vector<float> lp32(p.T);
    logprobs_from_hidden(lp32.data(), nullptr, p.h.data(), p.w.data(), y32.data(), p.T, p.D, p.V, it);
    EXPECT_TRUE(test::same_bits(lp32.data(), lp.data(), p.T)) << "int32 targets";
  }
}

TEST(CrossEntropy, LogitsTwinBackwardMatchesFused) {
  const Problem p = make(kCeRowTile + 11, 9, kVocabChunk + 3, 13, true);  // 2 row tiles
  const float zc = 1e-3f, it = 1.0f;
  auto dl = randn(p.T, 14);
  std::vector<float> logits(p.T * p.V), loss(p.T), lse(p.T), dlogits(p.T * p.V);
  gemm_f32(p.T, p.V, p.D, p.h.data(), p.D, p.w.data(), p.D, true, logits.data(), p.V, false);
  cross_entropy_logits_fwd(loss.data(), lse.data(), logits.data(), p.y.data(), p.T, p.V, kIgnore, zc, it);
  cross_entropy_logits_bwd(dlogits.data(), dl.data(), logits.data(), p.y.data(), lse.data(), p.T,
                           p.V, kIgnore, zc, it);
  std::vector<float> dh_twin(p.T * p.D), dh(p.T * p.D);
  gemm_f32(p.T, p.D, p.V, dlogits.data(), p.V, p.w.data(), p.D, false, dh_twin.data(), p.D, false);
  cross_entropy_bwd(dh.data(), nullptr, dl.data(), p.h.data(), p.w.data(), p.y.data(), lse.data(),
                    p.T, p.D, p.V, kIgnore, zc, it, false);
  expect_close(dh, std::vector<double>(dh_twin.begin(), dh_twin.end()), 1e-5, 1e-7, "dhidden");
  // dweight: the fused kernel accumulates one row tile at a time; its K chain over the
  // rows continues across tiles, so it has the bits of one GEMM over all T rows.
  std::vector<float> dw_twin(p.V * p.D), dw(p.V * p.D);
  gemm_f32_tn(p.V, p.D, p.T, dlogits.data(), p.V, p.h.data(), p.D, dw_twin.data(), p.D, false);
  cross_entropy_bwd(nullptr, dw.data(), dl.data(), p.h.data(), p.w.data(), p.y.data(), lse.data(),
                    p.T, p.D, p.V, kIgnore, zc, it, false);
  EXPECT_TRUE(test::same_bits(dw.data(), dw_twin.data(), p.V * p.D)) << "dweight across row tiles";
}

// One pass over the logits (cross_entropy_fwd_bwd) = cross_entropy_fwd then
// cross_entropy_bwd, bit for bit: one row tile (small V) and several (V = 70000: tiles
// of kCeFusedMinRows rows and a shorter last one), ignored rows, z-loss, a temperature,
// per-row dloss, either gradient alone, outputs that held garbage, T = 0.
// Tile rows: the scratch budget's rows (64 MiB / 4 V), rounded down to a multiple of
// 256 only when T does not fit in one tile; at least 512 and at most min(T, 1024).
TEST(CrossEntropy, FusedTileRows) {
  EXPECT_EQ(cross_entropy_fused_tile_rows(4096, 32000), 512);  // budget 524 -> 512
  EXPECT_EQ(cross_entropy_fused_tile_rows(520, 32000), 520);   // fits: one tile
  EXPECT_EQ(cross_entropy_fused_tile_rows(524, 32000), 524);
  EXPECT_EQ(cross_entropy_fused_tile_rows(525, 32000), 512);
  EXPECT_EQ(cross_entropy_fused_tile_rows(4096, 151936), 512);  // budget 110 -> the minimum
  EXPECT_EQ(cross_entropy_fused_tile_rows(768, 256), 768);      // shakespeare_char: all rows
  EXPECT_EQ(cross_entropy_fused_tile_rows(4096, 256), 1024);
  EXPECT_EQ(cross_entropy_fused_tile_rows(3, 32000), 3);
}

TEST(CrossEntropy, FusedForwardBackwardHasTheTwoPassBits) {
  struct Case {
    int64_t T, D, V;
  };
  // Two tiles (T > R: V = 70000 and 33005) repack the weight once for all tiles (loss.h),
  // or not (packed_weight_max_bytes = 0); V = 33005 and D = 20 leave the last panel of
  // both layouts partly zero.
  for (const Case c : {Case{37, 16, kVocabChunk + 3}, Case{1000, 8, 70000}, Case{600, 20, 33005}}) {
    const int64_t R = cross_entropy_fused_tile_rows(c.T, c.V);
    ASSERT_EQ(R, c.T <= kCeFusedMinRows ? c.T : kCeFusedMinRows);
    const Problem p = make(c.T, c.D, c.V, 21, true);
    const float zc = 1e-3f, it = 1.0f / 0.7f;
    const auto dl = randn(p.T, 22);
    std::vector<float> loss(p.T), lse(p.T), dh(p.T * p.D), dw(p.V * p.D);
    cross_entropy_fwd(loss.data(), lse.data(), p.h.data(), p.w.data(), p.y.data(), p.T, p.D, p.V,
                      kIgnore, zc, it);
    cross_entropy_bwd(dh.data(), dw.data(), dl.data(), p.h.data(), p.w.data(), p.y.data(),
                      lse.data(), p.T, p.D, p.V, kIgnore, zc, it, false);
    std::vector<float> loss1(p.T), lse1(p.T), dh1(p.T * p.D, 7.0f), dw1(p.V * p.D, 7.0f);
    cross_entropy_fwd_bwd(loss1.data(), lse1.data(), dh1.data(), dw1.data(), dl.data(), p.h.data(),
                          p.w.data(), p.y.data(), p.T, p.D, p.V, kIgnore, zc, it);
    const std::string v = "V = " + std::to_string(p.V);
    EXPECT_TRUE(test::same_bits(loss1.data(), loss.data(), p.T)) << v << ": loss";
    EXPECT_TRUE(test::same_bits(lse1.data(), lse.data(), p.T)) << v << ": lse";
    EXPECT_TRUE(test::same_bits(dh1.data(), dh.data(), p.T * p.D)) << v << ": dhidden";
    EXPECT_TRUE(test::same_bits(dw1.data(), dw.data(), p.V * p.D)) << v << ": dweight";
    std::vector<float> dh2(p.T * p.D, 7.0f), dw2(p.V * p.D, 7.0f);
    cross_entropy_fwd_bwd(loss1.data(), nullptr, dh2.data(), nullptr, dl.data(), p.h.data(),
                          p.w.data(), p.y.data(), p.T, p.D, p.V, kIgnore, zc, it);
    cross_entropy_fwd_bwd(loss1.data(), nullptr, nullptr, dw2.data(), dl.data(), p.h.data(),
                          p.w.data(), p.y.data(), p.T, p.D, p.V, kIgnore, zc, it);
    EXPECT_TRUE(test::same_bits(dh2.data(), dh.data(), p.T * p.D)) << v << ": dhidden alone";
    EXPECT_TRUE(test::same_bits(dw2.data(), dw.data(), p.V * p.D)) << v << ": dweight alone";
    // Several tiles with a weight too big to repack (packed_weight_max_bytes = 0): every
    // tile packs W itself, as a Qwen3-sized vocabulary does.
    std::vector<float> loss3(p.T), dh3(p.T * p.D, 7.0f), dw3(p.V * p.D, 7.0f);
    cross_entropy_fwd_bwd(loss3.data(), nullptr, dh3.data(), dw3.data(), dl.data(), p.h.data(),
                          p.w.data(), p.y.data(), p.T, p.D, p.V, kIgnore, zc, it,
                          /*packed_weight_max_bytes=*/0);
    EXPECT_TRUE(test::same_bits(loss3.data(), loss.data(), p.T)) << v << ": loss, not repacked";
    EXPECT_TRUE(test::same_bits(dh3.data(), dh.data(), p.T * p.D))
        << v << ": dhidden, not repacked";
    EXPECT_TRUE(test::same_bits(dw3.data(), dw.data(), p.V * p.D))
        << v << ": dweight, not repacked";
  }
  std::vector<float> dw0(5 * 3, 7.0f);  // T = 0: dweight comes back zero
  cross_entropy_fwd_bwd(nullptr, nullptr, nullptr, dw0.data(), nullptr, nullptr, dw0.data(),
                        nullptr, 0, 3, 5, kIgnore, 0.0f, 1.0f);
  for (float v : dw0) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(cross_entropy_fused_tile_rows(5000, 151936), kCeFusedMinRows);
  EXPECT_EQ(cross_entropy_fused_tile_rows(5000, 259), kCeRowTile);
  EXPECT_EQ(cross_entropy_fused_tile_rows(3, 32000), 3);
  // The checks of both halves, under this name.
  std::vector<float> x(4), h(4, 0.0f), w(8, 0.0f), d(2, 1.0f);
  const std::vector<int64_t> bad{0, 4};
  try {
    cross_entropy_fwd_bwd(x.data(), nullptr, x.data(), nullptr, d.data(), h.data(), w.data(),
                          bad.data(), 2, 2, 4, kIgnore, 0.0f, 1.0f);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("cross_entropy_fwd_bwd: targets[1] = 4 is outside [0, V = 4)"),
        std::string::npos)
        << e.what();
  }
  EXPECT_THROW(cross_entropy_fwd_bwd(x.data(), nullptr, nullptr, nullptr, nullptr, h.data(),
                                     w.data(), bad.data(), 1, 2, 4, kIgnore, 0.0f, 1.0f),
               Error);  // dloss null
}

TEST(CrossEntropy, RowsAreBatchInvariant) {
  const Problem p = make(257, 16, kVocabChunk + 37, 17, true);
  auto dl = randn(p.T, 18);
  auto batch = [&](const std::vector<int64_t>& rows) {
    Problem b{static_cast<int64_t>(rows.size()), p.D, p.V, test::gather_rows(p.h, p.D, rows), p.w, {}};
    for (int64_t r : rows) b.y.push_back(p.y[r]);
    return b;
  };
  test::expect_batch_invariant(p.T, 2, [&](const std::vector<int64_t>& rows, std::vector<float>& out) {
    const Problem b = batch(rows);
    std::vector<float> loss(b.T), lse(b.T);
    cross_entropy_fwd(loss.data(), lse.data(), b.h.data(), b.w.data(), b.y.data(), b.T, b.D, b.V,
                      kIgnore, 1e-4f, 1.0f);
    for (int64_t j = 0; j < b.T; ++j) {
      out[2 * j] = loss[j];
      out[2 * j + 1] = lse[j];
    }
  }, "cross_entropy_fwd (loss, lse)");
  std::vector<float> loss(p.T), lse(p.T);
  cross_entropy_fwd(loss.data(), lse.data(), p.h.data(), p.w.data(), p.y.data(), p.T, p.D, p.V,
                    kIgnore, 1e-4f, 1.0f);
  test::expect_batch_invariant(p.T, p.D, [&](const std::vector<int64_t>& rows, std::vector<float>& out) {
    const Problem b = batch(rows);
    auto dlb = test::gather_rows(dl, 1, rows), lseb = test::gather_rows(lse, 1, rows);
    cross_entropy_bwd(out.data(), nullptr, dlb.data(), b.h.data(), b.w.data(), b.y.data(),
                      lseb.data(), b.T, b.D, b.V, kIgnore, 1e-4f, 1.0f, false);
  }, "cross_entropy_bwd dhidden");
  // dweight (a sum over rows) has the same bits for 1 and 2 threads
  test::ThreadGuard guard;
  std::vector<float> dw1(p.V * p.D), dw2(p.V * p.D);
  set_num_threads(1);
  cross_entropy_bwd(nullptr, dw1.data(), dl.data(), p.h.data(), p.w.data(), p.y.data(), lse.data(),
                    p.T, p.D, p.V, kIgnore, 1e-4f, 1.0f, false);
  set_num_threads(2);
  cross_entropy_bwd(nullptr, dw2.data(), dl.data(), p.h.data(), p.w.data(), p.y.data(), lse.data(),
                    p.T, p.D, p.V, kIgnore, 1e-4f, 1.0f, false);
  EXPECT_TRUE(test::same_bits(dw1.data(), dw2.data(), p.V * p.D));
}

TEST(CrossEntropy, BadInputThrowsNamedError) {
  const Problem p = make(3, 4, 10, 1, false);
  std::vector<float> loss(3);
  std::vector<int64_t> y = {1, 10, 2};
  try {
    cross_entropy_fwd(loss.data(), nullptr, p.h.data(), p.w.data(), y.data(), 3, 4, 10, kIgnore, 0.0f, 1.0f);
    FAIL();
  } catch (const titan::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cross_entropy_fwd: targets[1] = 10 is outside [0, V = 10)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(cross_entropy_fwd(loss.data(), nullptr, p.h.data(), p.w.data(), p.y.data(), 3, 4, 10,
                                 kIgnore, -1.0f, 1.0f),
               titan::Error);
  std::vector<int64_t> ign = {kIgnore, 0, 1};
  EXPECT_THROW(logprobs_from_hidden(loss.data(), nullptr, p.h.data(), p.w.data(), ign.data(), 3, 4, 10, 1.0f),
               titan::Error);
}

}  // namespace
}  // namespace titan::kernels::cpu
