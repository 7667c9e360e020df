// Activation kernels (SiLU, GELU-tanh, SwiGLU): double references, finite differences,
// and position independence of every element (masked tails, thread splits).
#include <gtest/gtest.h>

#include "rows_test_util.h"
#include "titan/core/error.h"
#include "titan/kernels/cpu/activation.h"

namespace titan::kernels::cpu {
namespace {
using test::expect_close;
using test::randn;

const int64_t kSizes[] = {1, 3, 15, 16, 17, 63, 257, 1000, 20001};

double silu(double x) { return x / (1 + std::exp(-x)); }
double gelu(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
template <class F>
double deriv(F f, double x) {  // central difference in double
  const double h = 1e-5;
  return (f(x + h) - f(x - h)) / (2 * h);
}

// Inputs spanning the saturated ranges too (|x| up to ~30, and ±100).
std::vector<float> inputs(int64_t n, uint32_t seed) {
  auto x = randn(n, seed, 4.0f);
  if (n > 4) {
    x[0] = -100.0f;
    x[1] = 100.0f;
    x[2] = 0.0f;
    x[3] = -30.0f;
  }
  return x;
}

TEST(Activation, SiluAndGeluMatchDoubleAndFiniteDifferences) {
  for (int64_t n : kSizes) {
    const auto x = inputs(n, 10 + static_cast<uint32_t>(n));
    const auto g = randn(n, 20 + static_cast<uint32_t>(n));
    std::vector<float> ys(n), yg(n), dxs(n), dxg(n);
    silu_fwd(ys.data(), x.data(), n);
    gelu_tanh_fwd(yg.data(), x.data(), n);
    silu_bwd(dxs.data(), g.data(), x.data(), n);
    gelu_tanh_bwd(dxg.data(), g.data(), x.data(), n);
    std::vector<double> rs(n), rg(n), rds(n), rdg(n);
    for (int64_t i = 0; i < n; ++i) {
      rs[i] = silu(x[i]);
      rg[i] = gelu(x[i]);
      rds[i] = g[i] * deriv(silu, x[i]);
      rdg[i] = g[i] * deriv(gelu, x[i]);
    }
    expect_close(ys, rs, 1e-6, 1e-6, "silu");
    expect_close(yg, rg, 1e-6, 2e-6, "gelu_tanh");
    expect_close(dxs, rds, 1e-5, 1e-6, "silu_bwd");
    expect_close(dxg, rdg, 1e-5, 2e-6, "gelu_tanh_bwd");
  }
}

TEST(Activation, TanhMatchesDouble) {
  for (int64_t n : kSizes) {
    auto x = inputs(n, 70 + static_cast<uint32_t>(n));
    for (int64_t i = 0; i < n; i += 5) x[i] *= 1e-3f;  // the small-|x| range too
    const auto g = randn(n, 80 + static_cast<uint32_t>(n));
    std::vector<float> y(n), dx(n);
    tanh_fwd(y.data(), x.data(), n);
    tanh_bwd(dx.data(), g.data(), y.data(), n);
    std::vector<double> ry(n), rdx(n);
    for (int64_t i = 0; i < n; ++i) {
      ry[i] = std::tanh(static_cast<double>(x[i]));
      rdx[i] = g[i] * deriv([](double v) { return std::tanh(v); }, x[i]);
    }
    expect_close(y, ry, 1e-6, 2e-7, "tanh");
    expect_close(dx, rdx, 1e-5, 1e-6, "tanh_bwd");
  }
}

TEST(Activation, SwigluMatchesDoubleAndFiniteDifferences) {
  for (int64_t n : kSizes) {
    const auto gate = inputs(n, 30 + static_cast<uint32_t>(n));
    const auto up = randn(n, 40 + static_cast<uint32_t>(n));
    const auto dout = randn(n, 50 + static_cast<uint32_t>(n));
    std::vector<float> y(n), dg(n), du(n);
    swiglu_fwd(y.data(), gate.data(), up.data(), n);
    swiglu_bwd(dg.data(), du.data(), dout.data(), gate.data(), up.data(), n);
    std::vector<double> ry(n), rdg(n), rdu(n);
    for (int64_t i = 0; i < n; ++i) {
      ry[i] = silu(gate[i]) * up[i];
      rdg[i] = dout[i] * up[i] * deriv(silu, gate[i]);
      rdu[i] = dout[i] * silu(gate[i]);
    }
    expect_close(y, ry, 1e-6, 1e-6, "swiglu");
    expect_close(dg, rdg, 1e-5, 1e-6, "swiglu dgate");
    expect_close(du, rdu, 1e-6, 1e-6, "swiglu dup");
  }
}

TEST(Activation, ElementsDoNotDependOnPositionOrThreads) {
  const int64_t N = 257, L = 37;  // rows of 37 elements: tails land at every lane offset
  const auto x = inputs(N * L, 60), u = randn(N * L, 61), d = randn(N * L, 62);
  test::expect_batch_invariant(N, 4 * L, [&](const std::vector<int64_t>& rows, std::vector<float>& out) {
    const int64_t n = static_cast<int64_t>(rows.size()) * L;
    auto xb = test::gather_rows(x, L, rows), ub = test::gather_rows(u, L, rows),
         db = test::gather_rows(d, L, rows);
    std::vector<float> a(n), b(n), c(n), e(n);
    gelu_tanh_fwd(a.data(), xb.data(), n);
    silu_bwd(b.data(), db.data(), xb.data(), n);
    swiglu_bwd(c.data(), e.data(), db.data(), xb.data(), ub.data(), n);
    for (size_t j = 0; j < rows.size(); ++j)
      for (int64_t i = 0; i < L; ++i) {
        float* o = out.data() + j * 4 * L;
        o[i] = a[j * L + i];
        o[L + i] = b[j * L + i];
        o[2 * L + i] = c[j * L + i];
        o[3 * L + i] = e[j * L + i];
      }
  }, "activations");
}

TEST(Activation, BadInputThrows) {
  float x = 1.0f;
  EXPECT_THROW(silu_fwd(&x, &x, -1), titan::Error);
  EXPECT_THROW(swiglu_fwd(&x, nullptr, &x, 1), titan::Error);
  silu_fwd(nullptr, nullptr, 0);  // empty is fine
}

}  // namespace
}  // namespace titan::kernels::cpu
