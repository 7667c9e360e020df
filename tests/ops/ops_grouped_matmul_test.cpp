// grouped_linear (the MoE expert GEMM) against a float64 loop reference (forward and
// both gradients), against linear() on each group alone (bitwise), and batch
// invariance of one row: the same bits alone, in groups of 7 and 257 rows, at any
// position in its group, with 1 and 2 threads (memcmp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "titan/autograd/node.h"
#include "titan/core/error.h"
#include "titan/core/thread_pool.h"
#include "titan/ops/grouped_matmul.h"
#include "titan/ops/matmul.h"
#include "titan/ops/reduce.h"
#include "titan/ops/elementwise.h"

namespace titan {
namespace {

struct ThreadScope {
  int saved = num_threads();
  explicit ThreadScope(int n) { set_num_threads(n); }
  ~ThreadScope() { set_num_threads(saved); }
};

TEST(GroupedLinear, MatchesFloat64ReferenceWithGradients) {
  const int64_t in = 37, outf = 21;
  const std::vector<int64_t> off = {0, 5, 5, 17, 18, 30};  // group 1 empty
  const int64_t G = 5, M = off.back();
  Tensor x = Tensor::randn({M, in}, 11), w = Tensor::randn({G, outf, in}, 12);
  Tensor gy = Tensor::randn({M, outf}, 13);
  x.requires_grad_();
  w.requires_grad_();
  Tensor y = grouped_linear(x, w, off);
  sum(mul(y, gy)).backward();
  auto X = x.detach().to_vector<float>(), W = w.detach().to_vector<float>(), GY = gy.to_vector<float>();
  auto Y = y.detach().to_vector<float>(), DX = x.grad().to_vector<float>(), DW = w.grad().to_vector<float>();
  double max_err = 0;
  for (int64_t g = 0; g < G; ++g)
    for (int64_t r = off[g]; r < off[g + 1]; ++r)
      for (int64_t o = 0; o < outf; ++o) {
        double s = 0;
        for (int64_t k = 0; k < in; ++k) s += double(X[r * in + k]) * W[(g * outf + o) * in + k];
        max_err = std::max(max_err, std::abs(s - Y[r * outf + o]));
      }
  EXPECT_LT(max_err, 2e-5);
  double ex = 0, ew = 0;
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t r = off[g]; r < off[g + 1]; ++r)
      for (int64_t k = 0; k < in; ++k) {
        double s = 0;
        for (int64_t o = 0; o < outf; ++o) s += double(GY[r * outf + o]) * W[(g * outf + o) * in + k];
        ex = std::max(ex, std::abs(s - DX[r * in + k]));
      }
    for (int64_t o = 0; o < outf; ++o)
      for (int64_t k = 0; k < in; ++k) {
        double s = 0;
        for (int64_t r = off[g]; r < off[g + 1]; ++r) s += double(GY[r * outf + o]) * X[r * in + k];
        ew = std::max(ew, std::abs(s - DW[(g * outf + o) * in + k]));
        if (off[g] == off[g + 1]) EXPECT_EQ(DW[(g * outf + o) * in + k], 0.0f);
      }
  }
  EXPECT_LT(ex, 2e-5);
  EXPECT_LT(ew, 2e-5);
}

TEST(GroupedLinear, EachGroupHasTheBitsOfLinearOnItsRows) {
  for (int threads : {1, 2}) {
    ThreadScope ts(threads);
    const int64_t in = 64, outf = 48, G = 9;
    std::vector<int64_t> off = {0};
    for (int64_t g = 0; g < G; ++g) off.push_back(off.back() + (g * 7) % 11);
    Tensor x = Tensor::randn({off.back(), in}, 21), w = Tensor::randn({G, outf, in}, 22);
    Tensor y = grouped_linear(x, w, off);
    for (int64_t g = 0; g < G; ++g) {
      const int64_t m = off[g + 1] - off[g];
      if (m == 0) continue;
      Tensor ref = linear(x.narrow(0, off[g], m).contiguous(), w.select(0, g).contiguous());
      Tensor got = y.narrow(0, off[g], m).contiguous();
      EXPECT_EQ(std::memcmp(ref.data<float>(), got.data<float>(), m * outf * sizeof(float)), 0) << "group " << g;
    }
  }
}

// One probe row routed to group 3 of 8; the other rows of its group (0, 6 or 256 of
// them) and of the other groups are random. Its output row must keep its bits.
TEST(GroupedLinear, RowIsBatchInvariant) {
  const int64_t in = 96, outf = 80, G = 8;
  Tensor w = Tensor::randn({G, outf, in}, 31);
  Tensor probe = Tensor::randn({1, in}, 32);
  std::vector<float> want;
  for (int threads : {1, 2})
    for (int64_t group_rows : {1, 7, 257})
      for (int64_t at : {int64_t(0), group_rows / 2, group_rows - 1}) {
        ThreadScope ts(threads);
        std::vector<int64_t> off = {0};
        for (int64_t g = 0; g < G; ++g) off.push_back(off.back() + (g == 3 ? group_rows : 5 + g));
        Tensor x = Tensor::randn({off.back(), in}, 33 + group_rows);
        const int64_t r = off[3] + at;
        x.narrow(0, r, 1).copy_(probe);
        Tensor y = grouped_linear(x, w, off);
        std::vector<float> row = y.narrow(0, r, 1).contiguous().to_vector<float>();
        if (want.empty()) want = row;
        EXPECT_EQ(std::memcmp(want.data(), row.data(), outf * sizeof(float)), 0)
            << "threads " << threads << " group rows " << group_rows << " at " << at;
      }
}

TEST(GroupedLinear, RejectsBadArguments) {
  Tensor x = Tensor::randn({6, 8}, 1), w = Tensor::randn({2, 4, 8}, 2);
  EXPECT_THROW(grouped_linear(x, w, {0, 3}), Error);         // G + 1 values needed
  EXPECT_THROW(grouped_linear(x, w, {0, 4, 5}), Error);      // must end at 6
  EXPECT_THROW(grouped_linear(x, w, {0, 4, 3, 6}), Error);   // wrong count
  EXPECT_THROW(grouped_linear(x, Tensor::randn({2, 4, 7}, 3), {0, 3, 6}), Error);
  EXPECT_THROW(grouped_linear(x, w, {1, 3, 6}), Error);       // must start at 0
  EXPECT_NO_THROW(grouped_linear(x, w, {0, 6, 6}));
}

}  // namespace
}  // namespace titan
