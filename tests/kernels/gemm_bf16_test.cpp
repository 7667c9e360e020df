// Tests of the bf16 kernels (titan/kernels/cpu/bf16.h).
//  - cast_f32_to_bf16 equals the scalar rule titan::f32_to_bf16 bit for bit on every
//    upper half-word with a set of lower half-words (ties, NaNs, subnormals, infinities);
//  - the hardware: VDPBF16PS equals the chain of bf16.h (odd product first, DAZ inputs,
//    FTZ after rounding) computed in software with std::fmaf, on random pairs with
//    subnormals, infinities and NaNs (skipped where the CPU lacks AVX512_BF16);
//  - gemm_bf16 on every available build and path (AVX-512 instruction, AVX-512
//    emulation, AVX2 emulation) gives the same bits, equal to the scalar chain, on
//    random inputs with subnormals, odd K, padded strides, all four layouts,
//    accumulate on/off;
//  - batch invariance: a row alone or inside M = 3, 29, 300 at different offsets, with 1
//    and 2 threads, gives memcmp-identical results;
//  - the product is close to the exact product (a double reference).
#include "titan/kernels/cpu/bf16.h"

#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "titan/core/dtype.h"
#include "titan/core/error.h"
#include "tests/kernels/bf16_chain_ref.h"
#include "titan/core/thread_pool.h"

namespace titan::kernels::cpu {
namespace {

using test::bf16_chain::daz;
using test::bf16_chain::fma_ftz;
using test::bf16_chain::kMin;
using test::bf16_chain::step;

uint32_t bits(float f) { return f32_bits(f); }

// bf16 values over the whole exponent range, with subnormals (exponent field 0) and,
// when `specials`, infinities and NaNs (exponent field 255).
uint16_t random_bf16(std::mt19937& rng, int mode, bool specials) {
  const uint16_t s = static_cast<uint16_t>(rng() & 0x8000u);
  int e;
  switch (mode) {
    case 0: e = 120 + static_cast<int>(rng() % 16); break;            // ordinary values
    case 1: e = static_cast<int>(rng() % (specials ? 256 : 255)); break;  // all exponents
    default: e = rng() % 4 == 0 ? 0 : static_cast<int>(rng() % 12);  // near underflow
  }
  return static_cast<uint16_t>(s | (e << 7) | (rng() & 0x7f));
}

TEST(Bf16Cast, VectorEqualsScalarRule) {
  const uint16_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x4000, 0xc000, 0x1234};
  std::vector<float> x;
  for (uint32_t hi = 0; hi < 65536; ++hi)
    for (uint16_t lo : lows) x.push_back(bits_f32(hi << 16 | lo));
  x.push_back(0x1p-149f);
  std::vector<uint16_t> y(x.size());
  cast_f32_to_bf16(x.data(), y.data(), static_cast<int64_t>(x.size()));
  size_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i) bad += y[i] != f32_to_bf16(x[i]);
  EXPECT_EQ(bad, 0u);
  // The rule itself on fixed cases: a tie to even down and up, a NaN quieted, a
  // subnormal kept, overflow to inf.
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f808000u)), 0x3f80);
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f818000u)), 0x3f82);
  EXPECT_EQ(f32_to_bf16(bits_f32(0x7f800001u)), 0x7fc0);
  EXPECT_EQ(f32_to_bf16(bits_f32(0x00018000u)), 0x0002);
  EXPECT_EQ(f32_to_bf16(bits_f32(0x7f7fffffu)), 0x7f80);
  // Widening back is exact, on every bf16 pattern.
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> w(all.size());
  cast_bf16_to_f32(all.data(), w.data(), 65536);
  for (uint32_t i = 0; i < 65536; ++i) ASSERT_EQ(bits(w[i]), i << 16);
}

// VDPBF16PS of one pair against the chain of bf16.h in software.
[[gnu::target("avx512f,avx512bf16")]] float dp_hw(uint16_t a0, uint16_t a1, uint16_t b0,
                                                   uint16_t b1, float c) {
  const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(a0 | (uint32_t{a1} << 16)));
  const __m512bh bv = (__m512bh)_mm512_set1_epi32(static_cast<int>(b0 | (uint32_t{b1} << 16)));
  return _mm512_cvtss_f32(_mm512_dpbf16_ps(_mm512_set1_ps(c), av, bv));
}

TEST(Bf16Gemm, InstructionMatchesTheSpecifiedChain) {
  if (!bf16_instruction_available()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  std::mt19937 rng(7);
  int64_t bad = 0, nan_bad = 0, n = 0;
  for (int it = 0; it < 3000000; ++it) {
    const int mode = it % 3;
    const uint16_t a0 = random_bf16(rng, mode, true), a1 = random_bf16(rng, mode, true);
    const uint16_t b0 = random_bf16(rng, mode, true), b1 = random_bf16(rng, mode, true);
    const int ce = mode == 2 ? (rng() % 4 == 0 ? 0 : static_cast<int>(rng() % 6))
                             : mode == 0 ? 100 + static_cast<int>(rng() % 40) : static_cast<int>(rng() % 256);
    const float c = bits_f32((static_cast<uint32_t>(rng()) & 0x807fffffu) | (uint32_t(ce) << 23));
    const float hw = dp_hw(a0, a1, b0, b1, c);
    const float ref = step(a0, b0, step(a1, b1, c));
    ++n;
    if (std::isnan(hw) || std::isnan(ref))
      nan_bad += std::isnan(hw) != std::isnan(ref);
    else
      bad += bits(hw) != bits(ref);
  }
  // Edge: 2^-126 - 2^-151 rounds to 2^-126 with an unbounded exponent: not tiny, kept.
  EXPECT_EQ(bits(dp_hw(0, f32_to_bf16(0x1p-75f), 0, f32_to_bf16(-0x1p-76f), kMin)), bits(kMin));
  EXPECT_EQ(bad, 0) << "of " << n;
  EXPECT_EQ(nan_bad, 0);
}

// A bf16 GEMM problem: A element (m, k), B element (k, n).
struct Problem {
  int64_t M, N, K, lda, ldb, ldc;
  bool a_trans, b_trans;
  std::vector<uint16_t> A, B;
  uint16_t a(int64_t m, int64_t k) const { return a_trans ? A[k * lda + m] : A[m * lda + k]; }
  uint16_t b(int64_t k, int64_t n) const { return b_trans ? B[n * ldb + k] : B[k * ldb + n]; }
};

Problem make_problem(int64_t M, int64_t N, int64_t K, bool at, bool bt, int pad, int mode,
                     std::mt19937& rng) {
  Problem p{M, N, K, std::max<int64_t>(1, (at ? M : K) + pad), std::max<int64_t>(1, (bt ? K : N) + pad),
            N + pad, at, bt, {}, {}};
  p.A.resize(static_cast<size_t>(std::max<int64_t>(1, (at ? K : M) * p.lda)));
  p.B.resize(static_cast<size_t>(std::max<int64_t>(1, (bt ? N : K) * p.ldb)));
  for (auto& v : p.A) v = random_bf16(rng, mode == 3 ? static_cast<int>(rng() % 3) : mode, false);
  for (auto& v : p.B) v = random_bf16(rng, mode == 3 ? static_cast<int>(rng() % 3) : mode, false);
  return p;
}

// The chain of bf16.h, element by element.
float reference(const Problem& p, int64_t m, int64_t n, float c0) {
  float c = c0;
  for (int64_t q = 0; 2 * q < p.K; ++q) {
    const bool has_odd = 2 * q + 1 < p.K;
    c = step(has_odd ? p.a(m, 2 * q + 1) : 0, has_odd ? p.b(2 * q + 1, n) : 0, c);
    c = step(p.a(m, 2 * q), p.b(2 * q, n), c);
  }
  return c;
}

struct Path {
  Isa isa;
  Bf16Dot dot;
  const char* name;
};
std::vector<Path> available_paths() {
  std::vector<Path> v{{Isa::avx2, Bf16Dot::emulation, "avx2-emulation"}};
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    v.push_back({Isa::avx512, Bf16Dot::emulation, "avx512-emulation"});
  if (bf16_instruction_available()) v.push_back({Isa::avx512, Bf16Dot::instruction, "avx512-instruction"});
  return v;
}

std::vector<float> run(const Path& path, const Problem& p, bool accumulate, const std::vector<float>& c0) {
  std::vector<float> C = c0;
  gemm_bf16_on(path.isa, path.dot, p.M, p.N, p.K, p.A.data(), p.lda, p.a_trans, p.B.data(), p.ldb,
               p.b_trans, C.data(), p.ldc, accumulate);
  return C;
}

TEST(Bf16Gemm, EveryPathEqualsTheScalarChain) {
  std::mt19937 rng(11);
  const auto paths = available_paths();
  std::printf("paths: %zu (default: %s)\n", paths.size(), std::string(bf16_dot_name(bf16_dot())).c_str());
  struct Shape {
    int64_t M, N, K;
  };
  const Shape shapes[] = {{1, 1, 1}, {1, 33, 7}, {5, 17, 64}, {14, 32, 513}, {15, 65, 3},
                          {29, 40, 1030}, {230, 70, 300}, {3, 100, 0}};
  for (const Shape& s : shapes)
    for (int layout = 0; layout < 4; ++layout)
      for (int mode : {0, 3}) {
        const bool at = layout & 1, bt = layout & 2;
        const Problem p = make_problem(s.M, s.N, s.K, at, bt, layout == 3 ? 3 : 0, mode, rng);
        for (bool acc : {false, true}) {
          std::vector<float> c0(static_cast<size_t>(p.M * p.ldc));
          for (auto& v : c0) v = bf16_to_f32(random_bf16(rng, mode == 3 ? 2 : 0, false)) * 1.5f;
          std::vector<float> want = c0;
          for (int64_t m = 0; m < p.M; ++m)
            for (int64_t n = 0; n < p.N; ++n)
              want[m * p.ldc + n] = p.K == 0 ? (acc ? c0[m * p.ldc + n] : 0.0f)
                                             : reference(p, m, n, acc ? c0[m * p.ldc + n] : 0.0f);
          for (const Path& path : paths) {
            const auto got = run(path, p, acc, c0);
            ASSERT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * got.size()), 0)
                << path.name << " M=" << s.M << " N=" << s.N << " K=" << s.K << " layout=" << layout
                << " mode=" << mode << " acc=" << acc;
          }
        }
      }
}

// Shapes past every block size of the kernel (several row blocks per thread, two
// column blocks of the shared packed B with a column tail, three K chunks with an odd
// K): every path on 1 and 2 threads gives the same bits, equal to the scalar chain on
// a sample of elements (every element of the first and last rows and columns, and a
// random sample inside).
TEST(Bf16Gemm, LargeBlockedShapesEqualTheScalarChain) {
  std::mt19937 rng(13);
  const auto paths = available_paths();
  const int saved = num_threads();
  const int64_t M = 470, N = 2090, K = 1031;
  for (int layout = 0; layout < 4; ++layout) {
    const bool at = layout & 1, bt = layout & 2;
    const Problem p = make_problem(M, N, K, at, bt, 3, 3, rng);
    std::vector<float> c0(static_cast<size_t>(p.M * p.ldc));
    for (auto& v : c0) v = bf16_to_f32(random_bf16(rng, 0, false));
    const bool acc = layout == 2;
    std::vector<float> first;
    for (const Path& path : paths)
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        const auto got = run(path, p, acc, c0);
        if (first.empty()) {
          first = got;
          std::vector<std::pair<int64_t, int64_t>> at_mn;
          for (int64_t n = 0; n < N; ++n) at_mn.push_back({0, n}), at_mn.push_back({M - 1, n});
          for (int64_t m = 0; m < M; ++m) at_mn.push_back({m, 0}), at_mn.push_back({m, N - 1});
          for (int i = 0; i < 2000; ++i) at_mn.push_back({rng() % M, rng() % N});
          for (auto [m, n] : at_mn)
            ASSERT_EQ(bits(got[m * p.ldc + n]), bits(reference(p, m, n, acc ? c0[m * p.ldc + n] : 0.0f)))
                << path.name << " layout=" << layout << " m=" << m << " n=" << n;
        } else {
          ASSERT_EQ(std::memcmp(got.data(), first.data(), sizeof(float) * got.size()), 0)
              << path.name << " threads=" << threads << " layout=" << layout;
        }
      }
  }
  set_num_threads(saved);
}

TEST(Bf16Gemm, BatchInvariantAcrossRowsAndThreads) {
  std::mt19937 rng(5);
  const int64_t N = 77, K = 301;
  const Problem big = make_problem(300, N, K, false, true, 0, 0, rng);
  const int saved = num_threads();
  for (const Path& path : available_paths()) {
    std::vector<float> alone(N);
    set_num_threads(1);
    gemm_bf16_on(path.isa, path.dot, 1, N, K, big.A.data() + 17 * K, K, false, big.B.data(), K, true,
                 alone.data(), N, false);
    for (int threads : {1, 2})
      for (int64_t M : {3, 29, 300}) {
        set_num_threads(threads);
        const int64_t m0 = std::min<int64_t>(17, M - 1), off = 17 - m0;  // row 17 at position m0
        std::vector<float> C(static_cast<size_t>(M * N));
        gemm_bf16_on(path.isa, path.dot, M, N, K, big.A.data() + off * K, K, false, big.B.data(), K,
                     true, C.data(), N, false);
        EXPECT_EQ(std::memcmp(C.data() + m0 * N, alone.data(), sizeof(float) * N), 0)
            << path.name << " M=" << M << " threads=" << threads;
      }
  }
  set_num_threads(saved);
}

TEST(Bf16Gemm, CloseToTheExactProduct) {
  std::mt19937 rng(3);
  const Problem p = make_problem(9, 50, 1000, false, false, 0, 0, rng);
  std::vector<float> C(static_cast<size_t>(p.M * p.ldc));
  gemm_bf16(p.M, p.N, p.K, p.A.data(), p.lda, false, p.B.data(), p.ldb, false, C.data(), p.ldc, false);
  for (int64_t m = 0; m < p.M; ++m)
    for (int64_t n = 0; n < p.N; ++n) {
      double exact = 0, mag = 0;
      for (int64_t k = 0; k < p.K; ++k) {
        const double t = double(bf16_to_f32(p.a(m, k))) * bf16_to_f32(p.b(k, n));
        exact += t;
        mag += std::fabs(t);
      }
      EXPECT_NEAR(C[m * p.ldc + n], exact, 1e-5 * mag);  // fp32 accumulation over 1000 terms
    }
}

TEST(Bf16Gemm, RepackedPanelsGiveTheSameBits) {
  std::mt19937 rng(9);
  for (int64_t K : {1, 64, 301}) {
    const int64_t N = 70;
    const Problem w = make_problem(1, N, K, false, true, 0, 3, rng);
    std::vector<uint32_t> panels(static_cast<size_t>(gemm_bf16_panels_size(N, K)));
    gemm_bf16_pack_panels(N, K, w.B.data(), K, panels.data());
    for (int64_t M : {1, 5, 40}) {
      const Problem a = make_problem(M, N, K, false, true, 0, 3, rng);
      std::vector<float> want(static_cast<size_t>(M * N)), got(want.size());
      gemm_bf16(M, N, K, a.A.data(), K, false, w.B.data(), K, true, want.data(), N, false);
      gemm_bf16_panels(M, N, K, a.A.data(), K, panels.data(), got.data(), N, false);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * got.size()), 0) << "M=" << M << " K=" << K;
      for (int64_t m = 0; m < M; ++m)
        ASSERT_EQ(bits(got[m * N + 3]), bits(reference(Problem{M, N, K, K, K, N, false, true, a.A, w.B}, m, 3, 0.0f)));
    }
  }
}

TEST(Bf16Gemm, ArgumentErrors) {
  std::vector<uint16_t> a(16), b(16);
  std::vector<float> c(16);
  EXPECT_THROW(gemm_bf16(-1, 2, 2, a.data(), 2, false, b.data(), 2, true, c.data(), 2, false), Error);
  EXPECT_THROW(gemm_bf16(2, 2, 3, a.data(), 2, false, b.data(), 3, true, c.data(), 2, false), Error);
  EXPECT_THROW(gemm_bf16(2, 2, 2, a.data(), 2, false, b.data(), 1, true, c.data(), 2, false), Error);
  EXPECT_THROW(gemm_bf16(2, 2, 2, nullptr, 2, false, b.data(), 2, true, c.data(), 2, false), Error);
  EXPECT_THROW(gemm_bf16_on(Isa::avx2, Bf16Dot::instruction, 1, 1, 1, a.data(), 1, false, b.data(), 1,
                            true, c.data(), 1, false),
               Error);
}

}  // namespace
}  // namespace titan::kernels::cpu
