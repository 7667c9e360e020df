// Public bf16 entry points: argument checks, the process-wide path choice, then the
// per-ISA kernels (titan/kernels/cpu/isa/bf16_cast.cpp, isa/gemm_bf16.cpp, isa/gemm_bf16_rows.cpp).
#include "titan/kernels/cpu/bf16.h"

#include <cstdlib>
#include <string>

#include "titan/core/error.h"

TITAN_DECLARE_ISA(void, cast_f32_to_bf16, (const float* x, uint16_t* y, int64_t n))
TITAN_DECLARE_ISA(void, round_to_bf16, (float* x, int64_t n))
TITAN_DECLARE_ISA(void, cast_bf16_to_f32, (const uint16_t* x, float* y, int64_t n))
TITAN_DECLARE_ISA(void, gemm_bf16_run,
                  (int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool a_trans,
                   const uint16_t* B, int64_t ldb, bool b_trans, float* C, int64_t ldc,
                   bool accumulate, bool dp))

TITAN_DECLARE_ISA(int64_t, gemm_bf16_panel_width, ())
TITAN_DECLARE_ISA(void, gemm_bf16_pack_panels,
                  (int64_t N, int64_t K, const uint16_t* W, int64_t ldw, uint32_t* dst))
TITAN_DECLARE_ISA(bool, gemm_bf16_panels_rows,
                  (int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                   const uint32_t* Bp, float* C, int64_t ldc, bool accumulate))
TITAN_DECLARE_ISA(void, gemm_bf16_panels_run,
                  (int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                   const uint32_t* Bp, float* C, int64_t ldc, bool accumulate, bool dp))

namespace titan::kernels::cpu {

namespace {

bool has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}

Bf16Dot detect_dot() {
  const bool inst = cpu_isa() == Isa::avx512 && bf16_instruction_available();
  if (const char* env = std::getenv("TITAN_BF16_DOT")) {
    const std::string s(env);
    if (s == "emulation") return Bf16Dot::emulation;
    if (s == "instruction") {
      TITAN_CHECK(inst, "TITAN_BF16_DOT=instruction but the {} path of this CPU has no AVX512_BF16",
                  isa_name(cpu_isa()));
      return Bf16Dot::instruction;
    }
    fail("TITAN_BF16_DOT='{}' is not a known path (expected instruction or emulation)", s);
  }
  return inst ? Bf16Dot::instruction : Bf16Dot::emulation;
}

void check_gemm(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool a_trans,
                const uint16_t* B, int64_t ldb, bool b_trans, const float* C, int64_t ldc) {
  TITAN_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm_bf16: sizes must be >= 0, got M={} N={} K={}", M, N, K);
  const int64_t lda_min = a_trans ? M : K, ldb_min = b_trans ? K : N;
  TITAN_CHECK(lda >= lda_min && lda >= 1, "gemm_bf16: lda must be >= {}, got {}", lda_min, lda);
  TITAN_CHECK(ldb >= ldb_min && ldb >= 1, "gemm_bf16: ldb must be >= {}, got {}", ldb_min, ldb);
  TITAN_CHECK(ldc >= N && ldc >= 1, "gemm_bf16: ldc must be >= N={}, got {}", N, ldc);
  if (M > 0 && N > 0) {
    TITAN_CHECK(C != nullptr, "gemm_bf16: C is null with M={} N={}", M, N);
    if (K > 0) TITAN_CHECK(A != nullptr && B != nullptr, "gemm_bf16: A or B is null with K={}", K);
  }
}

}  // namespace

void cast_f32_to_bf16(const float* x, uint16_t* y, int64_t n) {
  TITAN_CHECK(n >= 0, "cast_f32_to_bf16: n must be >= 0, got {}", n);
  if (n > 0) TITAN_CHECK(x != nullptr && y != nullptr, "cast_f32_to_bf16: null pointer with n={}", n);
  TITAN_DISPATCH(cast_f32_to_bf16, x, y, n);
}

void cast_bf16_to_f32(const uint16_t* x, float* y, int64_t n) {
  TITAN_CHECK(n >= 0, "cast_bf16_to_f32: n must be >= 0, got {}", n);
  if (n > 0) TITAN_CHECK(x != nullptr && y != nullptr, "cast_bf16_to_f32: null pointer with n={}", n);
  TITAN_DISPATCH(cast_bf16_to_f32, x, y, n);
}

void round_to_bf16(float* x, int64_t n) {
  TITAN_CHECK(n >= 0, "round_to_bf16: n must be >= 0, got {}", n);
  if (n > 0) TITAN_CHECK(x != nullptr, "round_to_bf16: null pointer with n={}", n);
  TITAN_DISPATCH(round_to_bf16, x, n);
}

bool bf16_instruction_available() {
  static const bool has = has_avx512() && __builtin_cpu_supports("avx512bf16");
  return has;
}

Bf16Dot bf16_dot() {
  static const Bf16Dot d = detect_dot();
  return d;
}

std::string_view bf16_dot_name(Bf16Dot d) {
  return d == Bf16Dot::instruction ? "instruction" : "emulation";
}

void gemm_bf16(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool a_trans,
               const uint16_t* B, int64_t ldb, bool b_trans, float* C, int64_t ldc,
               bool accumulate) {
  check_gemm(M, N, K, A, lda, a_trans, B, ldb, b_trans, C, ldc);
  TITAN_DISPATCH(gemm_bf16_run, M, N, K, A, lda, a_trans, B, ldb, b_trans, C, ldc, accumulate,
                 bf16_dot() == Bf16Dot::instruction);
}

void gemm_bf16_on(Isa isa, Bf16Dot dot, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                  int64_t lda, bool a_trans, const uint16_t* B, int64_t ldb, bool b_trans,
                  float* C, int64_t ldc, bool accumulate) {
  check_gemm(M, N, K, A, lda, a_trans, B, ldb, b_trans, C, ldc);
  const bool dp = dot == Bf16Dot::instruction;
  if (isa == Isa::avx512) {
    TITAN_CHECK(has_avx512(), "gemm_bf16_on: this CPU lacks AVX-512 (F/BW/DQ/VL)");
    TITAN_CHECK(!dp || bf16_instruction_available(), "gemm_bf16_on: this CPU lacks AVX512_BF16");
    avx512::gemm_bf16_run(M, N, K, A, lda, a_trans, B, ldb, b_trans, C, ldc, accumulate, dp);
  } else {
    TITAN_CHECK(!dp, "gemm_bf16_on: the AVX2 build has no bf16 dot-product instruction");
    avx2::gemm_bf16_run(M, N, K, A, lda, a_trans, B, ldb, b_trans, C, ldc, accumulate, false);
  }
}

int64_t gemm_bf16_panel_width() { return TITAN_DISPATCH(gemm_bf16_panel_width); }

int64_t gemm_bf16_panels_size(int64_t N, int64_t K) {
  TITAN_CHECK(N >= 0 && K >= 0, "gemm_bf16_panels_size: sizes must be >= 0, got N={} K={}", N, K);
  const int64_t w = gemm_bf16_panel_width();
  return (N + w - 1) / w * w * ((K + 1) / 2);
}

void gemm_bf16_pack_panels(int64_t N, int64_t K, const uint16_t* W, int64_t ldw, uint32_t* dst) {
  TITAN_CHECK(N >= 0 && K >= 0, "gemm_bf16_pack_panels: sizes must be >= 0, got N={} K={}", N, K);
  TITAN_CHECK(ldw >= K && ldw >= 1, "gemm_bf16_pack_panels: ldw must be >= K={}, got {}", K, ldw);
  if (N == 0 || K == 0) return;
  TITAN_CHECK(W != nullptr && dst != nullptr, "gemm_bf16_pack_panels: W or dst is null with N={} K={}", N, K);
  TITAN_DISPATCH(gemm_bf16_pack_panels, N, K, W, ldw, dst);
}

void gemm_bf16_panels(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                      const uint32_t* Bp, float* C, int64_t ldc, bool accumulate) {
  TITAN_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm_bf16_panels: sizes must be >= 0, got M={} N={} K={}", M, N, K);
  TITAN_CHECK(lda >= K && lda >= 1, "gemm_bf16_panels: lda must be >= K={}, got {}", K, lda);
  TITAN_CHECK(ldc >= N && ldc >= 1, "gemm_bf16_panels: ldc must be >= N={}, got {}", N, ldc);
  if (M > 0 && N > 0) {
    TITAN_CHECK(C != nullptr, "gemm_bf16_panels: C is null with M={} N={}", M, N);
    if (K > 0) TITAN_CHECK(A != nullptr && Bp != nullptr, "gemm_bf16_panels: A or Bp is null with K={}", K);
  }
  const bool dp = bf16_dot() == Bf16Dot::instruction;
  // Decode rows (M <= 8) with the instruction: isa/gemm_bf16_rows.cpp, the same bits.
  if (dp && TITAN_DISPATCH(gemm_bf16_panels_rows, M, N, K, A, lda, Bp, C, ldc, accumulate)) return;
  TITAN_DISPATCH(gemm_bf16_panels_run, M, N, K, A, lda, Bp, C, ldc, accumulate, dp);
}

}  // namespace titan::kernels::cpu
