// GEMM kernels (raw pointers, row-major, no autograd). Batch-invariant by
// construction (DESIGN.md §1.2): every C[m][n] is one FMA chain over k = 0..K-1 in
// ascending order,
//     c = accumulate ? C[m][n] : +0.0f;  for k: c = fma(A[m][k], B[k][n], c)
// (exactly rounded fmaf semantics). Every path computes exactly this chain: the blocked
// paths cut K into chunks (64-512) whose fp32 partial is stored and reloaded (no bit
// changes), row tails run the same microkernel for fewer rows, column tails are
// zero-padded and masked; the decode path for M <= one vector of rows with fp32 NT
// weights keeps the rows in the vector lanes and the whole chain in a register. Which
// thread computes an element (static M/N blocks, or column chunks claimed at run time
// on the decode path) never changes how; neither does the weights' layout (NT, NN, or
// repacked into panels, below). So row m of C has the same bits whatever M
// is, wherever the row sits and whatever the thread count; the result equals a scalar
// std::fmaf loop over k bit for bit (tests check this). Since the chain is fully
// specified, the AVX-512 and AVX2 builds give the same bits as well (only the speed
// differs). The one exception is a NaN result's payload (which input NaN propagates),
// which the instruction form may choose; a NaN is still a NaN.
//
// Implementation: titan/kernels/cpu/isa/gemm.cpp (Goto/BLIS blocking: B packed in
// NR-wide panels, an MR x NR tile of C in registers: 6 x 16 on AVX2, 14 x 32 on
// AVX-512; K blocked by 512, 64 on the few-row path; the
// rows-in-lanes decode path for M <= 8 / 16). Source of the method: Goto & van de
// Geijn, "Anatomy of High-Performance Matrix Multiplication", ACM TOMS 34(3), 2008.
//
// Errors (titan::Error, message names the function and argument): negative sizes,
// a leading dimension smaller than the row width it must hold, null pointers for a
// non-empty problem. C must not overlap A or B. K = 0 sets C to 0 (or leaves it when
// accumulating).
#pragma once
#include <cstdint>

namespace titan::kernels::cpu {

// C(M, N) = A(M, K) · op(B) [+ C if accumulate], fp32.
//   b_trans = true : B is (N, K), row stride ldb >= K  (nn.Linear weight layout, "NT")
//   b_trans = false: B is (K, N), row stride ldb >= N  ("NN")
// A has row stride lda >= K, C row stride ldc >= N. Threads: num_threads() (static
// M/N blocks; column chunks on the M <= 8 / 16 NT fp32 decode path).
void gemm_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
              int64_t ldb, bool b_trans, float* C, int64_t ldc, bool accumulate);

// Same with B in bf16 (raw uint16 bits; converted exactly to fp32 while packing, fp32
// accumulation). Gives the same bits as gemm_f32 on the widened B.
void gemm_f32_bf16(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                   const uint16_t* B, int64_t ldb, bool b_trans, float* C, int64_t ldc,
                   bool accumulate);

// C(M, N) = A(K, M)ᵀ · B(K, N) [+ C if accumulate]: the weight-gradient product
// dW = dYᵀ · X. lda >= M, ldb >= N, ldc >= N. Each C[m][n] sums over k ascending.
void gemm_f32_tn(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                 int64_t ldb, float* C, int64_t ldc, bool accumulate);

// Weights repacked for inference ("panels", as llama.cpp repacks CPU weights at load):
// W (N, K) (the nn.Linear layout) rewritten as ceil(N / w) panels of w columns, each K
// rows of w floats (zero past column N), panels back to back; w = gemm_panel_width()
// (the microkernel's tile width: 16 on AVX2, 32 on AVX-512; fixed for the process, so
// a packed buffer is never saved or moved between processes). Every micro-panel is then
// read in place, and a decode step (few rows) streams each panel in address order with
// no packing. gemm_f32_panels(.., Bp = packed W, ..) gives the same bits as
// gemm_f32(.., W, K, b_trans = true, ..): the same chain per element.
//   gemm_panels_size: floats of the packed buffer, ceil(N / w) * w * K.
//   gemm_pack_panels: W (N, K) row stride ldw >= K -> dst (gemm_panels_size floats).
//   gemm_pack_panels_nn(K, N, B, ldb, dst): the same panels (gemm_panels_size(N, K)
//     floats; note the argument order) of a B stored (K, N) ("NN", row stride
//     ldb >= N), i.e. of W = Bᵀ: gemm_f32_panels(.., Bp, ..) then equals gemm_f32(..,
//     B, ldb, b_trans = false, ..) bit for bit (the LM head's dhidden = dlogits · W).
// Errors (titan::Error): negative sizes, ldw < K (ldb < N for _nn), null pointers for a
// non-empty problem.
int64_t gemm_panel_width();
int64_t gemm_panels_size(int64_t N, int64_t K);
void gemm_pack_panels(int64_t N, int64_t K, const float* W, int64_t ldw, float* dst);
void gemm_pack_panels_nn(int64_t K, int64_t N, const float* B, int64_t ldb, float* dst);
void gemm_f32_panels(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* Bp,
                     float* C, int64_t ldc, bool accumulate);

}  // namespace titan::kernels::cpu
