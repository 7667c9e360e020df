// Public GEMM entry points: argument checks, then the per-ISA kernel
// (titan/kernels/cpu/isa/gemm.cpp) chosen once per process by TITAN_DISPATCH.
#include "titan/kernels/cpu/gemm.h"

#include "titan/core/error.h"
#include "titan/kernels/cpu/dispatch.h"

TITAN_DECLARE_ISA(void, gemm_run,
                  (int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool a_trans,
                   const void* B, int64_t ldb, int b_kind, float* C, int64_t ldc, bool accumulate))

TITAN_DECLARE_ISA(int64_t, gemm_panel_width, ())
TITAN_DECLARE_ISA(void, gemm_pack_panels,
                  (int64_t N, int64_t K, const float* W, int64_t ldw, float* dst))
TITAN_DECLARE_ISA(void, gemm_pack_panels_nn,
                  (int64_t K, int64_t N, const float* B, int64_t ldb, float* dst))

namespace titan::kernels::cpu {
namespace {

// b_kind codes understood by isa/gemm.cpp.
constexpr int kNtF32 = 0, kNnF32 = 1, kNtBf16 = 2, kNnBf16 = 3, kPanelF32 = 4;

void check_args(const char* fn, int64_t M, int64_t N, int64_t K, const void* A, int64_t lda,
                int64_t lda_min, const void* B, int64_t ldb, int64_t ldb_min, const float* C,
                int64_t ldc) {
  TITAN_CHECK(M >= 0 && N >= 0 && K >= 0, "{}: sizes must be >= 0, got M={} N={} K={}", fn, M, N, K);
  TITAN_CHECK(lda >= lda_min && lda >= 1, "{}: lda must be >= {}, got {}", fn, lda_min, lda);
  TITAN_CHECK(ldb >= ldb_min && ldb >= 1, "{}: ldb must be >= {}, got {}", fn, ldb_min, ldb);
  TITAN_CHECK(ldc >= N && ldc >= 1, "{}: ldc must be >= N={}, got {}", fn, N, ldc);
  if (M > 0 && N > 0) {
    TITAN_CHECK(C != nullptr, "{}: C is null with M={} N={}", fn, M, N);
    if (K > 0) TITAN_CHECK(A != nullptr && B != nullptr, "{}: A or B is null with K={}", fn, K);
  }
}

}  // namespace

void gemm_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
              int64_t ldb, bool b_trans, float* C, int64_t ldc, bool accumulate) {
  check_args("gemm_f32", M, N, K, A, lda, K, B, ldb, b_trans ? K : N, C, ldc);
  TITAN_DISPATCH(gemm_run, M, N, K, A, lda, false, B, ldb, b_trans ? kNtF32 : kNnF32, C, ldc,
                 accumulate);
}

void gemm_f32_bf16(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const uint16_t* B,
                   int64_t ldb, bool b_trans, float* C, int64_t ldc, bool accumulate) {
  check_args("gemm_f32_bf16", M, N, K, A, lda, K, B, ldb, b_trans ? K : N, C, ldc);
  TITAN_DISPATCH(gemm_run, M, N, K, A, lda, false, B, ldb, b_trans ? kNtBf16 : kNnBf16, C, ldc,
                 accumulate);
}

void gemm_f32_tn(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                 int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  check_args("gemm_f32_tn", M, N, K, A, lda, M, B, ldb, N, C, ldc);
  TITAN_DISPATCH(gemm_run, M, N, K, A, lda, true, B, ldb, kNnF32, C, ldc, accumulate);
}

int64_t gemm_panel_width() {
  return TITAN_DISPATCH(gemm_panel_width);
}

int64_t gemm_panels_size(int64_t N, int64_t K) {
  TITAN_CHECK(N >= 0 && K >= 0, "gemm_panels_size: sizes must be >= 0, got N={} K={}", N, K);
  const int64_t w = gemm_panel_width();
  return (N + w - 1) / w * w * K;
}

void gemm_pack_panels(int64_t N, int64_t K, const float* W, int64_t ldw, float* dst) {
  TITAN_CHECK(N >= 0 && K >= 0, "gemm_pack_panels: sizes must be >= 0, got N={} K={}", N, K);
  TITAN_CHECK(ldw >= K && ldw >= 1, "gemm_pack_panels: ldw must be >= K={}, got {}", K, ldw);
  if (N == 0 || K == 0) return;
  TITAN_CHECK(W != nullptr && dst != nullptr, "gemm_pack_panels: W or dst is null with N={} K={}",
              N, K);
  TITAN_DISPATCH(gemm_pack_panels, N, K, W, ldw, dst);
}

void gemm_pack_panels_nn(int64_t K, int64_t N, const float* B, int64_t ldb, float* dst) {
  TITAN_CHECK(N >= 0 && K >= 0, "gemm_pack_panels_nn: sizes must be >= 0, got K={} N={}", K, N);
  TITAN_CHECK(ldb >= N && ldb >= 1, "gemm_pack_panels_nn: ldb must be >= N={}, got {}", N, ldb);
  if (N == 0 || K == 0) return;
  TITAN_CHECK(B != nullptr && dst != nullptr,
              "gemm_pack_panels_nn: B or dst is null with K={} N={}", K, N);
  TITAN_DISPATCH(gemm_pack_panels_nn, K, N, B, ldb, dst);
}

void gemm_f32_panels(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* Bp,
                     float* C, int64_t ldc, bool accumulate) {
  check_args("gemm_f32_panels", M, N, K, A, lda, K, Bp, 1, 1, C, ldc);
  TITAN_DISPATCH(gemm_run, M, N, K, A, lda, false, Bp, 1, kPanelF32, C, ldc, accumulate);
}

}  // namespace titan::kernels::cpu
