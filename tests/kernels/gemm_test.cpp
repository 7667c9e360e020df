// Tests of titan/kernels/cpu/gemm.h.
//  - correctness against a double-precision reference (odd sizes, padded strides,
//    all layouts, bf16 B, accumulate on/off);
//  - exactness of the contract: every C[m][n] equals, bit for bit, the scalar chain
//    c = fmaf(a[k], b[k], c) for k ascending (std::fmaf is exactly rounded, so this
//    chain has one correct answer that any conforming kernel must produce);
//  - batch invariance: a row computed alone or inside M = 2, 7, 64, 257 at different
//    offsets, shuffled, with 1 and 2 threads, gives memcmp-identical results;
//  - determinism, untouched padding, K = 0, argument errors.
#include "titan/kernels/cpu/gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "titan/core/dtype.h"
#include "titan/core/error.h"
#include "titan/core/thread_pool.h"

namespace titan::kernels::cpu {
namespace {

enum class Layout { NT, NN, NT_bf16, NN_bf16, TN };
const char* name(Layout l) {
  switch (l) {
    case Layout::NT: return "NT";
    case Layout::NN: return "NN";
    case Layout::NT_bf16: return "NT_bf16";
    case Layout::NN_bf16: return "NN_bf16";
    default: return "TN";
  }
}
bool is_bf16(Layout l) { return l == Layout::NT_bf16 || l == Layout::NN_bf16; }
bool b_trans(Layout l) { return l == Layout::NT || l == Layout::NT_bf16; }

// Values spread over a few binades so that the summation order changes the bits.
std::vector<float> random_vec(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::uniform_int_distribution<int> e(-4, 3);
  std::vector<float> v(n);
  for (auto& x : v) x = std::ldexp(u(rng), e(rng));
  return v;
}

// One GEMM problem with padded strides. A element (m, k), B element (k, n).
struct Case {
  Layout layout;
  int64_t M, N, K, lda, ldb, ldc;
  std::vector<float> A, Bf;   // Bf: fp32 B, or bf16 values widened (the exact inputs)
  std::vector<uint16_t> Bh;   // bf16 storage when is_bf16
  float a(int64_t m, int64_t k) const {
    return layout == Layout::TN ? A[k * lda + m] : A[m * lda + k];
  }
  float b(int64_t k, int64_t n) const {
    return b_trans(layout) ? Bf[n * ldb + k] : Bf[k * ldb + n];
  }
};

Case make_case(Layout l, int64_t M, int64_t N, int64_t K, int pad, std::mt19937& rng) {
  Case c{l, M, N, K, 0, 0, N + pad, {}, {}, {}};
  const int64_t a_rows = l == Layout::TN ? K : M, a_cols = l == Layout::TN ? M : K;
  const int64_t b_rows = b_trans(l) ? N : K, b_cols = b_trans(l) ? K : N;
  c.lda = a_cols + pad;
  c.ldb = b_cols + pad;
  c.A = random_vec(static_cast<size_t>(std::max<int64_t>(1, a_rows * c.lda)), rng);
  c.Bf = random_vec(static_cast<size_t>(std::max<int64_t>(1, b_rows * c.ldb)), rng);
  if (is_bf16(l)) {
    c.Bh.resize(c.Bf.size());
    for (size_t i = 0; i < c.Bf.size(); ++i) {
      c.Bh[i] = f32_to_bf16(c.Bf[i]);
      c.Bf[i] = bf16_to_f32(c.Bh[i]);
    }
  }
  return c;
}

void run(const Case& c, float* C, bool acc) {
  switch (c.layout) {
    case Layout::NT:
    case Layout::NN:
      gemm_f32(c.M, c.N, c.K, c.A.data(), c.lda, c.Bf.data(), c.ldb, b_trans(c.layout), C, c.ldc, acc);
      break;
    case Layout::NT_bf16:
    case Layout::NN_bf16:
      gemm_f32_bf16(c.M, c.N, c.K, c.A.data(), c.lda, c.Bh.data(), c.ldb, b_trans(c.layout), C,
                    c.ldc, acc);
      break;
    case Layout::TN:
      gemm_f32_tn(c.M, c.N, c.K, c.A.data(), c.lda, c.Bf.data(), c.ldb, C, c.ldc, acc);
      break;
  }
}

uint32_t bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

// Checks C against (1) the exact fmaf chain, bitwise, and (2) a double reference
// within the fp32 error bound of a length-K sum. C0 is C before the call.
void check(const Case& c, const std::vector<float>& C, const std::vector<float>& C0, bool acc) {
  const double u = std::ldexp(1.0, -24);
  int bad_bits = 0, bad_val = 0;
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = 0; n < c.N; ++n) {
      float s = acc ? C0[m * c.ldc + n] : 0.f;
      double ref = acc ? C0[m * c.ldc + n] : 0.0, mag = std::fabs(ref);
      for (int64_t k = 0; k < c.K; ++k) {
        s = std::fmaf(c.a(m, k), c.b(k, n), s);
        ref += double(c.a(m, k)) * double(c.b(k, n));
        mag += std::fabs(double(c.a(m, k)) * double(c.b(k, n)));
      }
      const float got = C[m * c.ldc + n];
      if (bits(got) != bits(s) && bad_bits++ < 3)
        ADD_FAILURE() << name(c.layout) << " M=" << c.M << " N=" << c.N << " K=" << c.K << " acc=" << acc
                      << " C[" << m << "][" << n << "]=" << got << " != fma chain " << s;
      if (std::fabs(got - ref) > (c.K + 2) * u * mag + 1e-30 && bad_val++ < 3)
        ADD_FAILURE() << name(c.layout) << " M=" << c.M << " N=" << c.N << " K=" << c.K
                      << " C[" << m << "][" << n << "]=" << got << " vs double " << ref;
    }
  // Padding columns of C are never written.
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = c.N; n < c.ldc; ++n)
      if (bits(C[m * c.ldc + n]) != bits(C0[m * c.ldc + n]) && bad_val++ < 3)
        ADD_FAILURE() << name(c.layout) << " wrote padding C[" << m << "][" << n << "]";
}

const Layout kLayouts[] = {Layout::NT, Layout::NN, Layout::NT_bf16, Layout::NN_bf16, Layout::TN};

TEST(Gemm, MatchesReferenceOddSizes) {
  const int64_t S[] = {1, 2, 3, 5, 7, 13, 17, 31, 64, 100, 257};
  const int64_t Ks[] = {1,   3,   17, 64,
                        257, 300, 520};  // > 512 crosses a blocked K chunk (> 64 a few-row one)
  std::mt19937 rng(1234);
  int idx = 0;
  for (Layout l : kLayouts)
    for (int64_t M : S)
      for (int64_t N : S) {
        const int64_t K = Ks[idx % 7];
        const bool acc = (idx / 7) % 2;
        ++idx;
        if (M * N * K > 1'500'000) continue;
        Case c = make_case(l, M, N, K, 3, rng);
        std::vector<float> C0 = random_vec(static_cast<size_t>(M * c.ldc), rng);
        for (int64_t m = 0; m < M; ++m)  // NaN sentinel in the padding
          for (int64_t n = N; n < c.ldc; ++n) C0[m * c.ldc + n] = std::nanf("");
        std::vector<float> C = C0;
        run(c, C.data(), acc);
        check(c, C, C0, acc);
      }
}

TEST(Gemm, LargeTilesAndThreads) {
  std::mt19937 rng(99);
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    // 310 rows (AVX2) and 1000 (AVX-512): with 2 threads, the shared-B-block path
    // (run_shared: B packed once by both threads, MC-row chunks claimed at run time),
    // over 2 K chunks or 2 NC blocks.
    for (Layout l : kLayouts)
      for (auto [M, N, K] : {std::array<int64_t, 3>{160, 70, 600},
                             {310, 130, 600},
                             {310, 2100, 40},
                             {1000, 300, 17}}) {
        Case c = make_case(l, M, N, K, 5, rng);
        std::vector<float> C0 = random_vec(static_cast<size_t>(c.M * c.ldc), rng), C = C0;
        const bool acc = N != 130;
        run(c, C.data(), acc);
        check(c, C, C0, acc);
      }
  }
}

// The decode path for at most one vector of rows (rows in the lanes, fp32 NT weights
// read in place, groups of 8 columns plus single-column tails, the next group
// prefetched) against the scalar chain, at every row count up to a full AVX-512 vector
// and one past it, with K steps of 16 plus tails, padded strides, 1 and 2 threads.
TEST(Gemm, DecodeRowsMatchChain) {
  std::mt19937 rng(4242);
  int idx = 0;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (int64_t M : {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17})
      for (int64_t N : {8, 16, 37, 100, 600})
        for (int64_t K : {1, 16, 17, 300}) {
          const bool acc = (idx++ % 3) == 1;
          Case c = make_case(Layout::NT, M, N, K, 3, rng);
          std::vector<float> C0 = random_vec(static_cast<size_t>(M * c.ldc), rng);
          for (int64_t m = 0; m < M; ++m)
            for (int64_t n = N; n < c.ldc; ++n) C0[m * c.ldc + n] = std::nanf("");
          std::vector<float> C = C0;
          run(c, C.data(), acc);
          check(c, C, C0, acc);
        }
  }
  set_num_threads(2);
}

// Weights repacked into panels (gemm_pack_panels from NT weights, gemm_pack_panels_nn
// from B stored (K, N)) against the scalar chain of the same weights, on every path the panels
// take: decode rows (up to kFewRows, 24 on AVX2 and 56 on AVX-512: whole panels streamed, columns
// claimed by the threads), medium rows, and many rows (micro-panels read in place, N past one NC
// block; M = 500 is past AVX-512's medium-row limit of 448); K tails and K past one KC chunk,
// column tails (the zero-padded last panel), padded strides, 1 and 2 threads.
TEST(Gemm, PanelsMatchChain) {
  std::mt19937 rng(99);
  struct Shape3 {
    int64_t M, N, K;
  };
  std::vector<Shape3> shapes;
  for (int64_t M : {1, 2, 5, 6, 7, 8, 9, 17, 24, 25})
    for (int64_t N : {16, 37, 100})
      for (int64_t K : {1, 17, 300}) shapes.push_back({M, N, K});
  for (Shape3 s : {Shape3{64, 200, 600}, Shape3{150, 70, 520}, Shape3{300, 2100, 33},
                   Shape3{13, 2100, 40}, Shape3{500, 70, 40}})
    shapes.push_back(s);
  int idx = 0;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const Shape3& s : shapes) {
      const bool acc = (idx++ % 3) == 1;
      // Every other shape packs the panels from B stored (K, N) (gemm_pack_panels_nn).
      const bool nn = idx % 2 == 0;
      Case c = make_case(nn ? Layout::NN : Layout::NT, s.M, s.N, s.K, 3, rng);
      std::vector<float> panels(static_cast<size_t>(gemm_panels_size(s.N, s.K)), std::nanf(""));
      if (nn)
        gemm_pack_panels_nn(s.K, s.N, c.Bf.data(), c.ldb, panels.data());
      else
        gemm_pack_panels(s.N, s.K, c.Bf.data(), c.ldb, panels.data());
      // The layout itself: panel j row k holds op(B)[k][j * w .. j * w + w), zero past N.
      const int64_t pw = gemm_panel_width();
      for (int64_t n = 0; n < (s.N + pw - 1) / pw * pw; ++n)
        for (int64_t k = 0; k < s.K; k += std::max<int64_t>(1, s.K / 7)) {
          const float got = panels[static_cast<size_t>((n / pw) * s.K * pw + k * pw + n % pw)];
          ASSERT_EQ(bits(got), bits(n < s.N ? c.b(k, n) : 0.0f))
              << "panel of B(" << k << ", " << n << ")";
        }
      std::vector<float> C0 = random_vec(static_cast<size_t>(s.M * c.ldc), rng);
      for (int64_t m = 0; m < s.M; ++m)
        for (int64_t n = s.N; n < c.ldc; ++n) C0[m * c.ldc + n] = std::nanf("");
      std::vector<float> C = C0;
      gemm_f32_panels(s.M, s.N, s.K, c.A.data(), c.lda, panels.data(), C.data(), c.ldc, acc);
      check(c, C, C0, acc);
    }
  }
  set_num_threads(2);
  const int64_t w = gemm_panel_width();
  EXPECT_TRUE(w == 16 || w == 32) << w;
  EXPECT_EQ(gemm_panels_size(37, 5), (37 + w - 1) / w * w * 5);
  std::vector<float> W(64), P(static_cast<size_t>(gemm_panels_size(4, 4)));
  EXPECT_THROW(gemm_pack_panels(4, 4, W.data(), 3, P.data()), Error);  // ldw < K
  EXPECT_THROW(gemm_pack_panels(-1, 4, W.data(), 4, P.data()), Error);
  EXPECT_THROW(gemm_pack_panels_nn(4, 4, W.data(), 3, P.data()), Error);  // ldb < N
  EXPECT_THROW(gemm_pack_panels_nn(4, -1, W.data(), 4, P.data()), Error);
  EXPECT_THROW(gemm_f32_panels(2, 4, 4, W.data(), 3, P.data(), W.data(), 4, false),
               Error);  // lda < K
}

// Row `target` of A (for TN: column) placed at `pos` inside an M-row problem whose
// other rows are random; returns row `pos` of C. C starts at c0 for that row.
std::vector<float> row_in_batch(Layout l, const std::vector<float>& target, const Case& base,
                                const std::vector<float>& c0, int64_t M, int64_t pos, bool acc,
                                std::mt19937& rng) {
  Case c = base;
  c.M = M;
  const int64_t K = base.K, N = base.N;
  c.lda = (l == Layout::TN ? M : K) + 1;
  c.A = random_vec(static_cast<size_t>((l == Layout::TN ? K : M) * c.lda), rng);
  for (int64_t k = 0; k < K; ++k) (l == Layout::TN ? c.A[k * c.lda + pos] : c.A[pos * c.lda + k]) = target[k];
  std::vector<float> C = random_vec(static_cast<size_t>(M * c.ldc), rng);
  std::copy(c0.begin(), c0.end(), C.begin() + pos * c.ldc);
  run(c, C.data(), acc);
  return std::vector<float>(C.begin() + pos * c.ldc, C.begin() + pos * c.ldc + N);
}

TEST(Gemm, BatchInvariantRows) {
  std::mt19937 rng(7);
  for (Layout l : kLayouts)
    for (bool acc : {false, true}) {
      const int64_t K = 300, N = 50;  // K crosses a KC chunk, N has a column tail
      Case base = make_case(l, 1, N, K, 2, rng);
      const std::vector<float> target = random_vec(K, rng), c0 = random_vec(N, rng);
      set_num_threads(1);
      const std::vector<float> ref = row_in_batch(l, target, base, c0, 1, 0, acc, rng);
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        for (int64_t M : {1, 2, 7, 64, 257}) {
          std::vector<int64_t> positions = {0, M - 1, M / 2,
                                            std::uniform_int_distribution<int64_t>(0, M - 1)(rng)};
          std::shuffle(positions.begin(), positions.end(), rng);
          for (int64_t pos : positions) {
            std::vector<float> got = row_in_batch(l, target, base, c0, M, pos, acc, rng);
            ASSERT_EQ(0, std::memcmp(got.data(), ref.data(), sizeof(float) * N))
                << name(l) << " acc=" << acc << " threads=" << threads << " M=" << M << " pos=" << pos;
          }
        }
      }
    }
  set_num_threads(2);
}

// The invariance test has teeth: on its data, other summation orders (the lane-split
// dot product of a GEMV path, or reversed k) give different bits than the kernel.
TEST(Gemm, SummationOrderChangesBits) {
  std::mt19937 rng(7);
  const int64_t K = 300, N = 50;
  Case c = make_case(Layout::NT, 1, N, K, 0, rng);
  std::vector<float> C(N);
  run(c, C.data(), false);
  int differ_lanes = 0, differ_rev = 0;
  for (int64_t n = 0; n < N; ++n) {
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0}, rev = 0.f;
    for (int64_t k = 0; k < K; ++k) lane[k % 8] = std::fmaf(c.a(0, k), c.b(k, n), lane[k % 8]);
    for (int64_t k = K - 1; k >= 0; --k) rev = std::fmaf(c.a(0, k), c.b(k, n), rev);
    const float gemv = ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
    differ_lanes += bits(gemv) != bits(C[n]);
    differ_rev += bits(rev) != bits(C[n]);
  }
  EXPECT_GT(differ_lanes, 0);
  EXPECT_GT(differ_rev, 0);
}

TEST(Gemm, DeterministicAcrossCallsAndThreads) {
  std::mt19937 rng(5);
  for (Layout l : kLayouts) {
    Case c = make_case(l, 129, 77, 513, 1, rng);
    std::vector<float> C1(c.M * c.ldc), C2(c.M * c.ldc), C3(c.M * c.ldc);
    set_num_threads(2);
    run(c, C1.data(), false);
    run(c, C2.data(), false);
    set_num_threads(1);
    run(c, C3.data(), false);
    set_num_threads(2);
    EXPECT_EQ(0, std::memcmp(C1.data(), C2.data(), C1.size() * sizeof(float))) << name(l);
    EXPECT_EQ(0, std::memcmp(C1.data(), C3.data(), C1.size() * sizeof(float))) << name(l);
  }
}

TEST(Gemm, ZeroK) {
  std::vector<float> A(4), B(4), C(6, 5.f);
  gemm_f32(2, 3, 0, A.data(), 1, B.data(), 3, false, C.data(), 3, true);
  for (float x : C) EXPECT_EQ(x, 5.f);
  gemm_f32(2, 3, 0, A.data(), 1, B.data(), 3, false, C.data(), 3, false);
  for (float x : C) EXPECT_EQ(x, 0.f);
  gemm_f32(0, 3, 4, A.data(), 4, B.data(), 4, true, C.data(), 3, false);  // M = 0: no-op
}

TEST(Gemm, BadArgumentsThrow) {
  std::vector<float> A(64), B(64), C(64);
  EXPECT_THROW(gemm_f32(-1, 2, 2, A.data(), 2, B.data(), 2, true, C.data(), 2, false), Error);
  EXPECT_THROW(gemm_f32(2, 2, 4, A.data(), 3, B.data(), 4, true, C.data(), 2, false), Error);   // lda < K
  EXPECT_THROW(gemm_f32(2, 2, 4, A.data(), 4, B.data(), 3, true, C.data(), 2, false), Error);   // ldb < K
  EXPECT_THROW(gemm_f32(2, 5, 4, A.data(), 4, B.data(), 4, false, C.data(), 5, false), Error);  // ldb < N
  EXPECT_THROW(gemm_f32(2, 4, 4, A.data(), 4, B.data(), 4, true, C.data(), 3, false), Error);   // ldc < N
  EXPECT_THROW(gemm_f32(2, 2, 2, nullptr, 2, B.data(), 2, true, C.data(), 2, false), Error);
  EXPECT_THROW(gemm_f32_tn(4, 2, 2, A.data(), 3, B.data(), 2, C.data(), 2, false), Error);      // lda < M
  try {
    gemm_f32(2, 2, 4, A.data(), 3, B.data(), 4, true, C.data(), 2, false);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gemm_f32: lda"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace titan::kernels::cpu
