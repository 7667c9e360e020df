// RMSNorm / LayerNorm entry points: argument validation and run-time ISA dispatch.
#include "titan/kernels/cpu/norm.h"

#include <cmath>

#include "titan/core/error.h"
#include "titan/kernels/cpu/dispatch.h"

TITAN_DECLARE_ISA(void, rms_norm_fwd,
                  (float* out, float* rstd, const float* x, const float* w, int64_t T, int64_t D,
                   float eps))
TITAN_DECLARE_ISA(void, rms_norm_bwd,
                  (float* dx, float* dw, const float* dout, const float* x, const float* w,
                   const float* rstd, int64_t T, int64_t D, bool accumulate_dw))
TITAN_DECLARE_ISA(void, layer_norm_fwd,
                  (float* out, float* mean, float* rstd, const float* x, const float* w,
                   const float* b, int64_t T, int64_t D, float eps))
TITAN_DECLARE_ISA(void, layer_norm_bwd,
                  (float* dx, float* dw, float* db, const float* dout, const float* x,
                   const float* w, const float* mean, const float* rstd, int64_t T, int64_t D,
                   bool accumulate))

namespace titan::kernels::cpu {

namespace {
void check_sizes(const char* fn, int64_t T, int64_t D) {
  TITAN_CHECK(T >= 0, "{}: T must be >= 0, got {}", fn, T);
  TITAN_CHECK(D >= 1, "{}: D must be >= 1, got {}", fn, D);
}
void check_ptr(const char* fn, const char* name, const void* p, int64_t T) {
  TITAN_CHECK(p != nullptr || T == 0, "{}: {} must not be null", fn, name);
}
void check_eps(const char* fn, float eps) {
  TITAN_CHECK(std::isfinite(eps) && eps >= 0.0f, "{}: eps must be finite and >= 0, got {}", fn,
              eps);
}
}  // namespace

void rms_norm_fwd(float* out, float* rstd, const float* x, const float* w, int64_t T, int64_t D,
                  float eps) {
  constexpr const char* fn = "rms_norm_fwd";
  check_sizes(fn, T, D);
  check_eps(fn, eps);
  check_ptr(fn, "out", out, T);
  check_ptr(fn, "x", x, T);
  TITAN_DISPATCH(rms_norm_fwd, out, rstd, x, w, T, D, eps);
}

void rms_norm_bwd(float* dx, float* dw, const float* dout, const float* x, const float* w,
                  const float* rstd, int64_t T, int64_t D, bool accumulate_dw) {
  constexpr const char* fn = "rms_norm_bwd";
  check_sizes(fn, T, D);
  check_ptr(fn, "dx", dx, T);
  check_ptr(fn, "dout", dout, T);
  check_ptr(fn, "x", x, T);
  check_ptr(fn, "rstd", rstd, T);
  TITAN_CHECK(dw == nullptr || w != nullptr, "{}: dw given but the norm has no weight (w is null)",
              fn);
  TITAN_DISPATCH(rms_norm_bwd, dx, dw, dout, x, w, rstd, T, D, accumulate_dw);
}

void layer_norm_fwd(float* out, float* mean, float* rstd, const float* x, const float* w,
                    const float* b, int64_t T, int64_t D, float eps) {
  constexpr const char* fn = "layer_norm_fwd";
  check_sizes(fn, T, D);
  check_eps(fn, eps);
  check_ptr(fn, "out", out, T);
  check_ptr(fn, "x", x, T);
  TITAN_DISPATCH(layer_norm_fwd, out, mean, rstd, x, w, b, T, D, eps);
}

void layer_norm_bwd(float* dx, float* dw, float* db, const float* dout, const float* x,
                    const float* w, const float* mean, const float* rstd, int64_t T, int64_t D,
                    bool accumulate) {
  constexpr const char* fn = "layer_norm_bwd";
  check_sizes(fn, T, D);
  check_ptr(fn, "dx", dx, T);
  check_ptr(fn, "dout", dout, T);
  check_ptr(fn, "x", x, T);
  check_ptr(fn, "mean", mean, T);
  check_ptr(fn, "rstd", rstd, T);
  TITAN_CHECK(dw == nullptr || w != nullptr, "{}: dw given but the norm has no weight (w is null)",
              fn);
  TITAN_DISPATCH(layer_norm_bwd, dx, dw, db, dout, x, w, mean, rstd, T, D, accumulate);
}

}  // namespace titan::kernels::cpu
