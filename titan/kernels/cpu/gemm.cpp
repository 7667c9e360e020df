// Temporary portable fixed-order GEMM (each C[m][n] summed over k ascending with
// explicit fmaf). Replaced by the packed SIMD kernel in isa/gemm.cpp.
#include "titan/kernels/cpu/gemm.h"

#include <cmath>

#include "titan/core/dtype.h"
#include "titan/core/thread_pool.h"

namespace titan::kernels::cpu {

template <typename LoadB>
static void gemm_ref(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, LoadB b,
                     float* C, int64_t ldc, bool acc) {
  parallel_for(M, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m)
      for (int64_t n = 0; n < N; ++n) {
        float s = acc ? C[m * ldc + n] : 0.f;
        for (int64_t k = 0; k < K; ++k) s = std::fmaf(A[m * lda + k], b(n, k), s);
        C[m * ldc + n] = s;
      }
  });
}

void gemm_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
              int64_t ldb, bool b_trans, float* C, int64_t ldc, bool accumulate) {
  if (b_trans)
    gemm_ref(M, N, K, A, lda, [&](int64_t n, int64_t k) { return B[n * ldb + k]; }, C, ldc, accumulate);
  else
    gemm_ref(M, N, K, A, lda, [&](int64_t n, int64_t k) { return B[k * ldb + n]; }, C, ldc, accumulate);
}

void gemm_f32_bf16(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const uint16_t* B,
                   int64_t ldb, bool b_trans, float* C, int64_t ldc, bool accumulate) {
  if (b_trans)
    gemm_ref(M, N, K, A, lda, [&](int64_t n, int64_t k) { return bf16_to_f32(B[n * ldb + k]); }, C, ldc, accumulate);
  else
    gemm_ref(M, N, K, A, lda, [&](int64_t n, int64_t k) { return bf16_to_f32(B[k * ldb + n]); }, C, ldc, accumulate);
}

void gemm_f32_tn(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                 int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  parallel_for(M, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m)
      for (int64_t n = 0; n < N; ++n) {
        float s = accumulate ? C[m * ldc + n] : 0.f;
        for (int64_t k = 0; k < K; ++k) s = std::fmaf(A[k * lda + m], B[k * ldb + n], s);
        C[m * ldc + n] = s;
      }
  });
}

}  // namespace titan::kernels::cpu
