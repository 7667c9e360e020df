// RMSNorm / LayerNorm kernels: double-precision references, finite differences,
// bitwise batch invariance and thread-count independence of the weight gradients.
#include <gtest/gtest.h>

#include "rows_test_util.h"
#include "titan/core/error.h"
#include "titan/kernels/cpu/norm.h"

namespace titan::kernels::cpu {
namespace {
using test::expect_close;
using test::randn;

const int64_t kSizes[] = {1, 3, 15, 16, 17, 63, 257, 1000};

// ---- double references -----------------------------------------------------------
struct RmsRef {
  std::vector<double> y, rstd;
};
RmsRef rms_ref(const std::vector<double>& x, const std::vector<double>* w, int64_t T, int64_t D,
               double eps) {
  RmsRef r{std::vector<double>(x.size()), std::vector<double>(T)};
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0;
    for (int64_t j = 0; j < D; ++j) ss += x[t * D + j] * x[t * D + j];
    const double rs = 1.0 / std::sqrt(ss / D + eps);
    r.rstd[t] = rs;
    for (int64_t j = 0; j < D; ++j) r.y[t * D + j] = x[t * D + j] * rs * (w ? (*w)[j] : 1.0);
  }
  return r;
}
void rms_bwd_ref(std::vector<double>& dx, std::vector<double>& dw, const std::vector<double>& dout,
                 const std::vector<double>& x, const std::vector<double>* w, int64_t T, int64_t D,
                 double eps) {
  const RmsRef f = rms_ref(x, w, T, D, eps);
  dx.assign(x.size(), 0.0);
  dw.assign(D, 0.0);
  for (int64_t t = 0; t < T; ++t) {
    const double r = f.rstd[t];
    double dot = 0;
    for (int64_t j = 0; j < D; ++j) dot += dout[t * D + j] * (w ? (*w)[j] : 1.0) * x[t * D + j];
    for (int64_t j = 0; j < D; ++j) {
      const double g = dout[t * D + j] * (w ? (*w)[j] : 1.0);
      dx[t * D + j] = r * g - r * r * r * dot / D * x[t * D + j];
      dw[j] += dout[t * D + j] * x[t * D + j] * r;
    }
  }
}

struct LnRef {
  std::vector<double> y, mean, rstd;
};
LnRef ln_ref(const std::vector<double>& x, const std::vector<double>* w,
             const std::vector<double>* b, int64_t T, int64_t D, double eps) {
  LnRef r{std::vector<double>(x.size()), std::vector<double>(T), std::vector<double>(T)};
  for (int64_t t = 0; t < T; ++t) {
    double mu = 0, var = 0;
    for (int64_t j = 0; j < D; ++j) mu += x[t * D + j];
    mu /= D;
    for (int64_t j = 0; j < D; ++j) var += (x[t * D + j] - mu) * (x[t * D + j] - mu);
    const double rs = 1.0 / std::sqrt(var / D + eps);
    r.mean[t] = mu;
    r.rstd[t] = rs;
    for (int64_t j = 0; j < D; ++j)
      r.y[t * D + j] = (x[t * D + j] - mu) * rs * (w ? (*w)[j] : 1.0) + (b ? (*b)[j] : 0.0);
  }
  return r;
}
// L = Σ dout ⊙ y: the scalar whose gradient the backward kernels compute.
template <class Fwd>
double dot_loss(const std::vector<double>& dout, Fwd fwd) {
  const std::vector<double> y = fwd();
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += dout[i] * y[i];
  return s;
}
// Central finite difference of L w.r.t. v[i] (v is modified and restored).
template <class Fwd>
double fd(std::vector<double>& v, size_t i, const std::vector<double>& dout, Fwd fwd) {
  const double h = 1e-6, keep = v[i];
  v[i] = keep + h;
  const double lp = dot_loss(dout, fwd);
  v[i] = keep - h;
  const double lm = dot_loss(dout, fwd);
  v[i] = keep;
  return (lp - lm) / (2 * h);
}

// ---- RMSNorm ---------------------------------------------------------------------
TEST(RmsNorm, ForwardMatchesDouble) {
  for (int64_t D : kSizes) {
    const int64_t T = 5;
    auto x = randn(T * D, 1 + D, 2.0f), w = randn(D, 2 + D);
    std::vector<float> y(T * D), rstd(T);
    rms_norm_fwd(y.data(), rstd.data(), x.data(), w.data(), T, D, 1e-6f);
    const auto wd = test::to_double(w);
    const RmsRef r = rms_ref(test::to_double(x), &wd, T, D, 1e-6);
    expect_close(y, r.y, 2e-6, 1e-6, "rms_norm y");
    expect_close(rstd, r.rstd, 1e-6, 0, "rms_norm rstd");
    // no weight, in place
    std::vector<float> xi = x;
    rms_norm_fwd(xi.data(), nullptr, xi.data(), nullptr, T, D, 1e-6f);
    expect_close(xi, rms_ref(test::to_double(x), nullptr, T, D, 1e-6).y, 2e-6, 1e-6,
                 "rms_norm in place");
  }
}

TEST(RmsNorm, BackwardMatchesDoubleAndFiniteDifferences) {
  for (int64_t D : kSizes) {
    const int64_t T = 4;
    const double eps = 1e-5;
    auto x = randn(T * D, 10 + D), w = randn(D, 20 + D), dout = randn(T * D, 30 + D);
    std::vector<float> y(T * D), rstd(T), dx(T * D), dw(D);
    rms_norm_fwd(y.data(), rstd.data(), x.data(), w.data(), T, D, static_cast<float>(eps));
    rms_norm_bwd(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), T, D, false);
    auto xd = test::to_double(x), wd = test::to_double(w), gd = test::to_double(dout);
    std::vector<double> rdx, rdw;
    rms_bwd_ref(rdx, rdw, gd, xd, &wd, T, D, eps);
    expect_close(dx, rdx, 1e-4, 1e-5, "rms_norm dx");
    expect_close(dw, rdw, 1e-5, 1e-5, "rms_norm dw");
    // the double reference gradient against finite differences of the double forward
    auto fwd = [&] { return rms_ref(xd, &wd, T, D, eps).y; };
    for (size_t i : {size_t(0), xd.size() / 2, xd.size() - 1})
      EXPECT_NEAR(rdx[i], fd(xd, i, gd, fwd), 1e-6 * (1 + std::abs(rdx[i]))) << "D=" << D;
    for (size_t j : {size_t(0), wd.size() - 1})
      EXPECT_NEAR(rdw[j], fd(wd, j, gd, fwd), 1e-6 * (1 + std::abs(rdw[j]))) << "D=" << D;
    // accumulate_dw adds onto the existing values
    std::vector<float> dw2(D, 1.0f), dx2(T * D);
    rms_norm_bwd(dx2.data(), dw2.data(), dout.data(), x.data(), w.data(), rstd.data(), T, D, true);
    for (int64_t j = 0; j < D; ++j) EXPECT_EQ(dw2[j], 1.0f + dw[j]);
  }
}

TEST(RmsNorm, RowsAreBatchInvariant) {
  for (int64_t D : {int64_t(17), int64_t(1000)}) {
    const int64_t N = 257;
    auto x = randn(N * D, 7, 3.0f), w = randn(D, 8);
    test::expect_batch_invariant(N, D + 1, [&](const std::vector<int64_t>& rows, std::vector<float>& out) {
      const int64_t B = static_cast<int64_t>(rows.size());
      auto xb = test::gather_rows(x, D, rows);
      std::vector<float> y(B * D), r(B);
      rms_norm_fwd(y.data(), r.data(), xb.data(), w.data(), B, D, 1e-6f);
      for (int64_t j = 0; j < B; ++j) {
        std::copy_n(y.begin() + j * D, D, out.begin() + j * (D + 1));
        out[j * (D + 1) + D] = r[j];
      }
    }, "rms_norm_fwd");
  }
}

TEST(RmsNorm, BackwardBitsIndependentOfThreads) {
  const int64_t T = 300, D = 257;  // 5 row chunks, the last partial
  auto x = randn(T * D, 41), w = randn(D, 42), dout = randn(T * D, 43);
  std::vector<float> y(T * D), rstd(T);
  rms_norm_fwd(y.data(), rstd.data(), x.data(), w.data(), T, D, 1e-6f);
  test::ThreadGuard guard;
  std::vector<float> dx1(T * D), dw1(D), dx2(T * D), dw2(D);
  set_num_threads(1);
  rms_norm_bwd(dx1.data(), dw1.data(), dout.data(), x.data(), w.data(), rstd.data(), T, D, false);
  set_num_threads(2);
  rms_norm_bwd(dx2.data(), dw2.data(), dout.data(), x.data(), w.data(), rstd.data(), T, D, false);
  EXPECT_TRUE(test::same_bits(dw1.data(), dw2.data(), D)) << "dw differs between 1 and 2 threads";
  EXPECT_TRUE(test::same_bits(dx1.data(), dx2.data(), T * D));
  // dx rows are batch invariant too
  test::expect_batch_invariant(T, D, [&](const std::vector<int64_t>& rows, std::vector<float>& out) {
    const int64_t B = static_cast<int64_t>(rows.size());
    auto xb = test::gather_rows(x, D, rows), gb = test::gather_rows(dout, D, rows);
    auto rb = test::gather_rows(rstd, 1, rows);
    rms_norm_bwd(out.data(), nullptr, gb.data(), xb.data(), w.data(), rb.data(), B, D, false);
  }, "rms_norm_bwd dx");
}

TEST(RmsNorm, BadInputThrowsNamedError) {
  std::vector<float> x(4), y(4);
  try {
    rms_norm_fwd(y.data(), nullptr, x.data(), nullptr, 1, 0, 1e-6f);
    FAIL() << "expected titan::Error";
  } catch (const titan::Error& e) {
    EXPECT_NE(std::string(e.what()).find("rms_norm_fwd: D must be >= 1, got 0"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(rms_norm_fwd(y.data(), nullptr, x.data(), nullptr, 1, 4, -1.0f), titan::Error);
  float dw[4];
  EXPECT_THROW(rms_norm_bwd(y.data(), dw, x.data(), x.data(), nullptr, x.data(), 1, 4, false),
               titan::Error);
}

// ---- LayerNorm -------------------------------------------------------------------
TEST(LayerNorm, ForwardMatchesDouble) {
  for (int64_t D : kSizes) {
    const int64_t T = 5;
    auto x = randn(T * D, 50 + D, 2.0f), w = randn(D, 51 + D), b = randn(D, 52 + D);
    for (int variant = 0; variant < 4; ++variant) {
      const bool hw = variant & 1, hb = variant & 2;
      std::vector<float> y(T * D), mean(T), rstd(T);
      layer_norm_fwd(y.data(), mean.data(), rstd.data(), x.data(), hw ? w.data() : nullptr,
                     hb ? b.data() : nullptr, T, D, 1e-5f);
      const auto wd = test::to_double(w), bd = test::to_double(b);
      const LnRef r = ln_ref(test::to_double(x), hw ? &wd : nullptr, hb ? &bd : nullptr, T, D, 1e-5);
      expect_close(y, r.y, 1e-5, 2e-6, "layer_norm y");
      expect_close(mean, r.mean, 1e-5, 1e-6, "layer_norm mean");
      expect_close(rstd, r.rstd, 1e-5, 0, "layer_norm rstd");
    }
  }
}

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  for (int64_t D : kSizes) {
    const int64_t T = 3;
    const double eps = 1e-5;
    auto x = randn(T * D, 60 + D), w = randn(D, 61 + D), b = randn(D, 62 + D),
         dout = randn(T * D, 63 + D);
    std::vector<float> y(T * D), mean(T), rstd(T), dx(T * D), dw(D), db(D);
    layer_norm_fwd(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), T, D,
                   static_cast<float>(eps));
    layer_norm_bwd(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                   rstd.data(), T, D, false);
    auto xd = test::to_double(x), wd = test::to_double(w), bd = test::to_double(b),
         gd = test::to_double(dout);
    auto fwd = [&] { return ln_ref(xd, &wd, &bd, T, D, eps).y; };
    // Finite differences of the double forward for every input and parameter.
    std::vector<double> fdx(xd.size()), fdw(D), fdb(D);
    for (size_t i = 0; i < xd.size(); ++i) fdx[i] = fd(xd, i, gd, fwd);
    for (int64_t j = 0; j < D; ++j) {
      fdw[j] = fd(wd, j, gd, fwd);
      fdb[j] = fd(bd, j, gd, fwd);
    }
    expect_close(dx, fdx, 2e-4, 1e-4, "layer_norm dx");
    expect_close(dw, fdw, 1e-4, 1e-4, "layer_norm dw");
    expect_close(db, fdb, 1e-4, 1e-4, "layer_norm db");
  }
}

TEST(LayerNorm, RowsAndGradientsDeterministic) {
  const int64_t N = 257, D = 63;
  auto x = randn(N * D, 70), w = randn(D, 71), b = randn(D, 72), dout = randn(N * D, 73);
  test::expect_batch_invariant(N, D, [&](const std::vector<int64_t>& rows, std::vector<float>& out) {
    auto xb = test::gather_rows(x, D, rows);
    layer_norm_fwd(out.data(), nullptr, nullptr, xb.data(), w.data(), b.data(),
                   static_cast<int64_t>(rows.size()), D, 1e-5f);
  }, "layer_norm_fwd");
  std::vector<float> y(N * D), mean(N), rstd(N);
  layer_norm_fwd(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, D, 1e-5f);
  test::ThreadGuard guard;
  std::vector<float> dx(N * D), dw1(D), db1(D), dw2(D), db2(D);
  set_num_threads(1);
  layer_norm_bwd(dx.data(), dw1.data(), db1.data(), dout.data(), x.data(), w.data(), mean.data(),
                 rstd.data(), N, D, false);
  set_num_threads(2);
  layer_norm_bwd(dx.data(), dw2.data(), db2.data(), dout.data(), x.data(), w.data(), mean.data(),
                 rstd.data(), N, D, false);
  EXPECT_TRUE(test::same_bits(dw1.data(), dw2.data(), D));
  EXPECT_TRUE(test::same_bits(db1.data(), db2.data(), D));
}

}  // namespace
}  // namespace titan::kernels::cpu
