// gemm_bf16_panels at decode sizes (M <= 8 rows: isa/gemm_bf16_rows.cpp where the CPU
// has VDPBF16PS, the general path otherwise) against a scalar loop of the chain of
// titan/kernels/cpu/bf16.h (software fp32 FMAs with DAZ inputs and FTZ results after
// rounding), bitwise: random bf16 values with subnormals and values near underflow, odd
// K, N not a multiple of the panel width, padded leading dimensions, accumulate on
// and off, 1 and 2 threads; and against gemm_bf16 on the unpacked weight (M = 9, past
// the few-row path, too).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "titan/core/dtype.h"
#include "tests/kernels/bf16_chain_ref.h"
#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/bf16.h"

namespace titan::kernels::cpu {
namespace {

using test::bf16_chain::step;

// Ordinary values, or (near_underflow) exponents near the bottom of the range, subnormals included.
uint16_t random_bf16(std::mt19937& rng, bool near_underflow) {
  const uint16_t s = static_cast<uint16_t>(rng() & 0x8000u);
  const int e = near_underflow ? (rng() % 4 == 0 ? 0 : static_cast<int>(rng() % 12)) : 120 + static_cast<int>(rng() % 16);
  return static_cast<uint16_t>(s | (e << 7) | (rng() & 0x7f));
}

TEST(GemmBf16Rows, PanelsAtDecodeSizesAreTheChainBitwise) {
  std::mt19937 rng(2026);
  const int nt = num_threads();
  int64_t checked = 0;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (int64_t M = 1; M <= 9; ++M)
      for (int64_t N : {1, 31, 33, 100, 130, 257})
        for (int64_t K : {1, 2, 7, 64, 515})
          for (bool acc : {false, true}) {
            const bool tiny = rng() % 4 == 0;
            const int64_t lda = K + static_cast<int64_t>(rng() % 3), ldc = N + static_cast<int64_t>(rng() % 3);
            std::vector<uint16_t> A(static_cast<size_t>(M * lda)), W(static_cast<size_t>(N * K));
            for (auto& v : A) v = random_bf16(rng, tiny);
            for (auto& v : W) v = random_bf16(rng, tiny && rng() % 2);
            std::vector<float> C0(static_cast<size_t>(M * ldc));
            for (auto& v : C0) v = bf16_to_f32(random_bf16(rng, tiny));
            std::vector<uint32_t> Bp(static_cast<size_t>(gemm_bf16_panels_size(N, K)));
            gemm_bf16_pack_panels(N, K, W.data(), K, Bp.data());
            std::vector<float> C = C0, G = C0;
            gemm_bf16_panels(M, N, K, A.data(), lda, Bp.data(), C.data(), ldc, acc);
            gemm_bf16(M, N, K, A.data(), lda, false, W.data(), K, true, G.data(), ldc, acc);
            for (int64_t m = 0; m < M; ++m)
              for (int64_t n = 0; n < ldc; ++n) {
                const size_t i = static_cast<size_t>(m * ldc + n);
                float ref = C0[i];  // columns past N untouched
                if (n < N) {
                  ref = acc ? C0[i] : 0.0f;
                  for (int64_t q = 0; 2 * q < K; ++q) {
                    const bool odd = 2 * q + 1 < K;
                    ref = step(odd ? A[m * lda + 2 * q + 1] : 0, odd ? W[n * K + 2 * q + 1] : 0, ref);
                    ref = step(A[m * lda + 2 * q], W[n * K + 2 * q], ref);
                  }
                }
                ASSERT_EQ(f32_bits(C[i]), f32_bits(ref))
                    << "M=" << M << " N=" << N << " K=" << K << " acc=" << acc << " threads=" << threads
                    << " at (" << m << ", " << n << "): " << C[i] << " vs " << ref;
                ASSERT_EQ(f32_bits(G[i]), f32_bits(C[i])) << "gemm_bf16 vs panels at M=" << M << " N=" << N;
                ++checked;
              }
          }
  }
  set_num_threads(nt);
  EXPECT_GT(checked, 100000);
  std::printf("checked %lld elements on the %s path\n", static_cast<long long>(checked),
              std::string(bf16_dot_name(bf16_dot())).c_str());
}

}  // namespace
}  // namespace titan::kernels::cpu
