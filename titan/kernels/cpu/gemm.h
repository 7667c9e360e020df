// GEMM kernels (raw pointers, row-major, no autograd). Batch-invariant by
// construction (DESIGN.md §1.2): every C[m][n] is one FMA chain over k = 0..K-1 in
// ascending order, with the same microkernel arithmetic for every M (no GEMV path for
// M = 1, row tails are masked lanes of the same kernel), and threads split only M/N
// blocks. So row m of C has the same bits whatever M is and wherever the row sits.
#pragma once
#include <cstdint>

namespace titan::kernels::cpu {

// C(M, N) = A(M, K) · op(B) [+ C if accumulate], fp32.
//   b_trans = true : B is (N, K), row stride ldb  (nn.Linear weight layout, "NT")
//   b_trans = false: B is (K, N), row stride ldb  ("NN")
// A has row stride lda, C row stride ldc. Threads: num_threads(), static partition.
void gemm_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
              int64_t ldb, bool b_trans, float* C, int64_t ldc, bool accumulate);

// Same with B in bf16 (converted exactly to fp32 inside; fp32 accumulation).
void gemm_f32_bf16(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                   const uint16_t* B, int64_t ldb, bool b_trans, float* C, int64_t ldc,
                   bool accumulate);

// C(M, N) = A(K, M)ᵀ · B(K, N) [+ C if accumulate]: the weight-gradient product
// dW = dYᵀ · X. Each C[m][n] sums over k ascending.
void gemm_f32_tn(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                 int64_t ldb, float* C, int64_t ldc, bool accumulate);

}  // namespace titan::kernels::cpu
