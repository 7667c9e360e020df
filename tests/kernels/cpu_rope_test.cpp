// RoPE cache and application: direct double computation for both pairings, partial
// rotary, Llama-3 frequency scaling against the HF formula, inverse/adjoint, bitwise
// equalities between the entry points, and batch invariance.
#include <gtest/gtest.h>

#include <numbers>

#include "rows_test_util.h"
#include "titan/core/error.h"
#include "titan/kernels/cpu/rope.h"

namespace titan::kernels::cpu {
namespace {
using test::randn;

TEST(RopeCache, MatchesDoubleFormulaRoundedToFloat) {
  const int64_t P = 37, R = 10;
  const double theta = 10000.0;
  std::vector<float> c(P * R / 2), s(P * R / 2);
  rope_cache(c.data(), s.data(), P, R, theta);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t i = 0; i < R / 2; ++i) {
      const double a = static_cast<double>(p) * (1.0 / std::pow(theta, 2.0 * i / R));
      EXPECT_EQ(c[p * R / 2 + i], static_cast<float>(std::cos(a))) << p << "," << i;
      EXPECT_EQ(s[p * R / 2 + i], static_cast<float>(std::sin(a))) << p << "," << i;
    }
}

// HF transformers _compute_llama3_parameters, written with its torch.where structure.
TEST(RopeCache, Llama3ScalingFollowsTheHfFormula) {
  const int64_t R = 128;
  const double theta = 500000.0;
  RopeScaling sc;
  sc.kind = RopeScaling::Kind::llama3;
  sc.factor = 8.0;
  sc.low_freq_factor = 1.0;
  sc.high_freq_factor = 4.0;
  sc.original_max_position_embeddings = 8192;
  std::vector<double> got(R / 2);
  rope_inv_freq(got.data(), R, theta, sc);
  const double lw = 8192 / 1.0, hw = 8192 / 4.0;
  int low = 0, mid = 0, high = 0;
  for (int64_t i = 0; i < R / 2; ++i) {
    const double inv = 1.0 / std::pow(theta, static_cast<double>(2 * i) / R);
    const double wavelen = 2 * std::numbers::pi / inv;
    double l = wavelen > lw ? inv / 8.0 : inv;
    const double smooth = (8192 / wavelen - 1.0) / (4.0 - 1.0);
    const double smoothed = (1 - smooth) * l / 8.0 + smooth * l;
    const bool medium = !(wavelen < hw) && !(wavelen > lw);
    if (medium) l = smoothed;
    EXPECT_EQ(got[i], l) << "i=" << i;
    if (wavelen < hw) {
      ++high;
      EXPECT_EQ(got[i], inv);
    } else if (wavelen > lw) {
      ++low;
      EXPECT_EQ(got[i], inv / 8.0);
    } else {
      ++mid;
      EXPECT_GT(got[i], inv / 8.0);
      EXPECT_LT(got[i], inv);
    }
  }
  EXPECT_EQ(got[0], 1.0);
  EXPECT_GT(low, 0);
  EXPECT_GT(mid, 0);
  EXPECT_GT(high, 0);
  // The cache uses the scaled frequencies.
  std::vector<float> c(3 * R / 2), s(3 * R / 2);
  rope_cache(c.data(), s.data(), 3, R, theta, sc);
  EXPECT_EQ(c[2 * R / 2 + 63], static_cast<float>(std::cos(2.0 * got[63])));
  EXPECT_EQ(s[2 * R / 2 + 40], static_cast<float>(std::sin(2.0 * got[40])));
}

struct RopeCase {
  int64_t T, Hx, Dh, R, P;
  RopeStyle style;
};

// Direct double rotation (angles from the double frequencies, not the fp32 cache).
std::vector<double> rope_ref(const std::vector<float>& x, const std::vector<int64_t>& pos,
                             const RopeCase& k, double theta, bool inverse) {
  std::vector<double> out(x.begin(), x.end());
  const int64_t h = k.R / 2;
  for (int64_t t = 0; t < k.T; ++t)
    for (int64_t hd = 0; hd < k.Hx; ++hd)
      for (int64_t i = 0; i < h; ++i) {
        const double a = pos[t] * (1.0 / std::pow(theta, 2.0 * i / k.R));
        const double c = std::cos(a), s = inverse ? -std::sin(a) : std::sin(a);
        const int64_t base = (t * k.Hx + hd) * k.Dh;
        const int64_t i1 = k.style == RopeStyle::rotate_half ? i : 2 * i;
        const int64_t i2 = k.style == RopeStyle::rotate_half ? i + h : 2 * i + 1;
        const double x1 = x[base + i1], x2 = x[base + i2];
        out[base + i1] = x1 * c - x2 * s;
        out[base + i2] = x2 * c + x1 * s;
      }
  return out;
}

const RopeCase kCases[] = {
    {5, 3, 16, 16, 64, RopeStyle::rotate_half}, {5, 3, 16, 16, 64, RopeStyle::interleaved},
    {4, 2, 10, 6, 40, RopeStyle::rotate_half},  {4, 2, 10, 6, 40, RopeStyle::interleaved},
    {3, 5, 64, 64, 300, RopeStyle::rotate_half}, {3, 2, 34, 18, 9, RopeStyle::interleaved},
    {2, 1, 2, 2, 5, RopeStyle::rotate_half},     {6, 4, 128, 32, 1000, RopeStyle::rotate_half},
};

TEST(RopeApply, MatchesDirectDoubleForBothStylesAndPartialRotary) {
  const double theta = 10000.0;
  for (const RopeCase& k : kCases) {
    std::vector<float> c(k.P * k.R / 2), s(k.P * k.R / 2);
    rope_cache(c.data(), s.data(), k.P, k.R, theta);
    auto x = randn(k.T * k.Hx * k.Dh, static_cast<uint32_t>(k.Dh * 31 + k.R));
    std::vector<int64_t> pos(k.T);
    for (int64_t t = 0; t < k.T; ++t) pos[t] = (t * 37 + 5) % k.P;
    for (bool inverse : {false, true}) {
      std::vector<float> y(x.size());
      rope_apply(y.data(), x.data(), pos.data(), c.data(), s.data(), k.T, k.Hx, k.Dh, k.R, k.P,
                 k.style, inverse);
      test::expect_close(y, rope_ref(x, pos, k, theta, inverse), 2e-6, 2e-6, "rope");
      for (int64_t r = 0; r < k.T * k.Hx; ++r)  // dims past R are copied unchanged
        EXPECT_TRUE(test::same_bits(y.data() + r * k.Dh + k.R, x.data() + r * k.Dh + k.R, k.Dh - k.R));
      // in place gives the same bits
      std::vector<float> z = x;
      rope_apply(z.data(), z.data(), pos.data(), c.data(), s.data(), k.T, k.Hx, k.Dh, k.R, k.P,
                 k.style, inverse);
      EXPECT_TRUE(test::same_bits(z.data(), y.data(), static_cast<int64_t>(y.size())));
    }
  }
}

TEST(RopeApply, InverseIsTheAdjointAndUndoesTheRotation) {
  const RopeCase k{7, 3, 24, 16, 50, RopeStyle::interleaved};
  for (RopeStyle style : {RopeStyle::rotate_half, RopeStyle::interleaved}) {
    std::vector<float> c(k.P * k.R / 2), s(k.P * k.R / 2);
    rope_cache(c.data(), s.data(), k.P, k.R, 500000.0);
    const int64_t n = k.T * k.Hx * k.Dh;
    auto x = randn(n, 3), g = randn(n, 4);
    std::vector<int64_t> pos = {0, 3, 49, 7, 7, 20, 1};
    std::vector<float> rx(n), rtg(n), back(n);
    rope_apply(rx.data(), x.data(), pos.data(), c.data(), s.data(), k.T, k.Hx, k.Dh, k.R, k.P, style, false);
    rope_apply(rtg.data(), g.data(), pos.data(), c.data(), s.data(), k.T, k.Hx, k.Dh, k.R, k.P, style, true);
    rope_apply(back.data(), rx.data(), pos.data(), c.data(), s.data(), k.T, k.Hx, k.Dh, k.R, k.P, style, true);
    double a = 0, b = 0;
    for (int64_t i = 0; i < n; ++i) {
      a += static_cast<double>(rx[i]) * g[i];
      b += static_cast<double>(x[i]) * rtg[i];
    }
    EXPECT_NEAR(a, b, 1e-4) << "<R x, g> vs <x, R^T g>";
    test::expect_close(back, test::to_double(x), 1e-5, 1e-6, "inverse(apply(x))");
  }
}

TEST(RopeApply, FusedQkAndInt32PositionsGiveTheSameBits) {
  const int64_t T = 9, H = 4, Hkv = 2, Dh = 20, R = 12, P = 64;
  std::vector<float> c(P * R / 2), s(P * R / 2);
  rope_cache(c.data(), s.data(), P, R, 10000.0);
  auto q = randn(T * H * Dh, 5), k = randn(T * Hkv * Dh, 6);
  std::vector<int64_t> pos(T);
  std::vector<int32_t> pos32(T);
  for (int64_t t = 0; t < T; ++t) pos32[t] = static_cast<int32_t>(pos[t] = (t * 13) % P);
  for (RopeStyle style : {RopeStyle::rotate_half, RopeStyle::interleaved}) {
    std::vector<float> q1(q.size()), k1(k.size()), q2(q.size()), k2(k.size()), q3(q.size());
    rope_apply(q1.data(), q.data(), pos.data(), c.data(), s.data(), T, H, Dh, R, P, style, false);
    rope_apply(k1.data(), k.data(), pos.data(), c.data(), s.data(), T, Hkv, Dh, R, P, style, false);
    rope_apply_qk(q2.data(), k2.data(), q.data(), k.data(), pos32.data(), c.data(), s.data(), T, H,
                  Hkv, Dh, R, P, style, false);
    rope_apply(q3.data(), q.data(), pos32.data(), c.data(), s.data(), T, H, Dh, R, P, style, false);
    EXPECT_TRUE(test::same_bits(q1.data(), q2.data(), T * H * Dh));
    EXPECT_TRUE(test::same_bits(k1.data(), k2.data(), T * Hkv * Dh));
    EXPECT_TRUE(test::same_bits(q1.data(), q3.data(), T * H * Dh));
  }
}

TEST(RopeApply, TokensAreBatchInvariant) {
  const int64_t N = 257, Hx = 2, Dh = 40, R = 40, P = 512;
  std::vector<float> c(P * R / 2), s(P * R / 2);
  rope_cache(c.data(), s.data(), P, R, 10000.0);
  auto x = randn(N * Hx * Dh, 8);
  std::vector<float> pos_f(N);  // positions carried as floats through gather_rows
  for (int64_t t = 0; t < N; ++t) pos_f[t] = static_cast<float>((t * 101) % P);
  test::expect_batch_invariant(N, Hx * Dh, [&](const std::vector<int64_t>& rows, std::vector<float>& out) {
    const int64_t B = static_cast<int64_t>(rows.size());
    auto xb = test::gather_rows(x, Hx * Dh, rows);
    std::vector<int64_t> pb(B);
    for (int64_t j = 0; j < B; ++j) pb[j] = static_cast<int64_t>(pos_f[rows[j]]);
    rope_apply(out.data(), xb.data(), pb.data(), c.data(), s.data(), B, Hx, Dh, R, P,
               RopeStyle::rotate_half, false);
  }, "rope_apply");
}

TEST(RopeApply, BadInputThrowsNamedError) {
  std::vector<float> c(4 * 4), s(4 * 4), x(8);
  int64_t pos = 4;
  try {
    rope_apply(x.data(), x.data(), &pos, c.data(), s.data(), 1, 1, 8, 8, 4, RopeStyle::rotate_half, false);
    FAIL();
  } catch (const titan::Error& e) {
    EXPECT_NE(std::string(e.what()).find("rope_apply: positions[0] = 4 is outside the cache [0, P = 4)"),
              std::string::npos)
        << e.what();
  }
  int64_t ok = 1;
  EXPECT_THROW(rope_apply(x.data(), x.data(), &ok, c.data(), s.data(), 1, 1, 8, 10, 4,
                          RopeStyle::rotate_half, false),
               titan::Error);
  EXPECT_THROW(rope_cache(c.data(), s.data(), 4, 7, 10000.0), titan::Error);
  RopeScaling bad;
  bad.kind = RopeScaling::Kind::llama3;
  bad.low_freq_factor = 4.0;
  bad.high_freq_factor = 1.0;
  EXPECT_THROW(rope_cache(c.data(), s.data(), 4, 8, 10000.0, bad), titan::Error);
}

}  // namespace
}  // namespace titan::kernels::cpu
