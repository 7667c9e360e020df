// Grouped GEMM over rows sorted by group (the mixture-of-experts expert FFNs, dropless):
// group g owns rows [offsets[g], offsets[g+1]) of A and C and its own weight matrix
// B_g. Every group is one call of the batch-invariant GEMMs of gemm.h on its rows, so
// C[m][n] is the same single FMA chain over k ascending as gemm_f32 gives for that row
// alone: a row's bits do not depend on how many rows share its group, on where it sits
// in the group, or on the thread count (gemm.h). No capacity limit: any group size,
// empty groups included (their C rows do not exist; their dB is set to 0).
//
// Scheduling: with at least 2 × num_threads() non-empty groups, groups are assigned to
// threads whole (largest first, to the least-loaded thread; each GEMM then runs inline
// in its thread), otherwise the groups run one after another with the GEMM's own
// M/N-block parallelism. Either way every element is computed by the same chain.
//
// offsets: G + 1 non-decreasing row offsets, offsets[0] = 0, offsets[G] = M (the rows
// of A / C). Errors (titan::Error naming the function and argument): negative sizes,
// offsets that are not as above, null pointers for a non-empty problem.
#pragma once
#include <cstdint>
#include <vector>

namespace titan::kernels::cpu {

// C (M, N) = A (M, K) · op(B_g) for the rows of group g, fp32. B holds G matrices back
// to back, B_g = B + g * N * K:
//   b_trans = true : B_g is (N, K) (nn.Linear layout, "NT"), the forward x · W_gᵀ;
//   b_trans = false: B_g is (K, N) ("NN"), the input gradient dY · W_g.
// lda >= K, ldc >= N; B_g rows are dense (ldb = K for NT, N for NN).
void grouped_gemm_f32(const std::vector<int64_t>& offsets, int64_t N, int64_t K, const float* A,
                      int64_t lda, const float* B, bool b_trans, float* C, int64_t ldc);

// dB_g (M_out, N_out) = A_gᵀ · B_g for each group, the weight gradient
// dW_g = dY_gᵀ · X_g: A (rows, M_out) row stride lda, B (rows, N_out) row stride ldb;
// C holds G dense (M_out, N_out) matrices back to back. Each element sums over the
// group's rows in ascending order (gemm_f32_tn); an empty group's matrix is 0.
void grouped_gemm_f32_tn(const std::vector<int64_t>& offsets, int64_t M_out, int64_t N_out,
                         const float* A, int64_t lda, const float* B, int64_t ldb, float* C);

}  // namespace titan::kernels::cpu
