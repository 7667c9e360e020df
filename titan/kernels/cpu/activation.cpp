// Activation entry points: argument validation and run-time ISA dispatch.
#include "titan/kernels/cpu/activation.h"

#include "titan/core/error.h"
#include "titan/kernels/cpu/dispatch.h"

TITAN_DECLARE_ISA(void, silu_fwd, (float* out, const float* x, int64_t n))
TITAN_DECLARE_ISA(void, silu_bwd, (float* dx, const float* dout, const float* x, int64_t n))
TITAN_DECLARE_ISA(void, gelu_tanh_fwd, (float* out, const float* x, int64_t n))
TITAN_DECLARE_ISA(void, gelu_tanh_bwd, (float* dx, const float* dout, const float* x, int64_t n))
TITAN_DECLARE_ISA(void, tanh_fwd, (float* out, const float* x, int64_t n))
TITAN_DECLARE_ISA(void, tanh_bwd, (float* dx, const float* dout, const float* out, int64_t n))
TITAN_DECLARE_ISA(void, swiglu_fwd, (float* out, const float* gate, const float* up, int64_t n))
TITAN_DECLARE_ISA(void, swiglu_bwd,
                  (float* dgate, float* dup, const float* dout, const float* gate,
                   const float* up, int64_t n))

namespace titan::kernels::cpu {

namespace {
void check(const char* fn, int64_t n, std::initializer_list<std::pair<const char*, const void*>> ptrs) {
  TITAN_CHECK(n >= 0, "{}: n must be >= 0, got {}", fn, n);
  if (n == 0) return;
  for (auto [name, p] : ptrs) TITAN_CHECK(p != nullptr, "{}: {} must not be null", fn, name);
}
}  // namespace

void silu_fwd(float* out, const float* x, int64_t n) {
  check("silu_fwd", n, {{"out", out}, {"x", x}});
  TITAN_DISPATCH(silu_fwd, out, x, n);
}
void silu_bwd(float* dx, const float* dout, const float* x, int64_t n) {
  check("silu_bwd", n, {{"dx", dx}, {"dout", dout}, {"x", x}});
  TITAN_DISPATCH(silu_bwd, dx, dout, x, n);
}
void gelu_tanh_fwd(float* out, const float* x, int64_t n) {
  check("gelu_tanh_fwd", n, {{"out", out}, {"x", x}});
  TITAN_DISPATCH(gelu_tanh_fwd, out, x, n);
}
void gelu_tanh_bwd(float* dx, const float* dout, const float* x, int64_t n) {
  check("gelu_tanh_bwd", n, {{"dx", dx}, {"dout", dout}, {"x", x}});
  TITAN_DISPATCH(gelu_tanh_bwd, dx, dout, x, n);
}
void tanh_fwd(float* out, const float* x, int64_t n) {
  check("tanh_fwd", n, {{"out", out}, {"x", x}});
  TITAN_DISPATCH(tanh_fwd, out, x, n);
}
void tanh_bwd(float* dx, const float* dout, const float* out, int64_t n) {
  check("tanh_bwd", n, {{"dx", dx}, {"dout", dout}, {"out", out}});
  TITAN_DISPATCH(tanh_bwd, dx, dout, out, n);
}
void swiglu_fwd(float* out, const float* gate, const float* up, int64_t n) {
  check("swiglu_fwd", n, {{"out", out}, {"gate", gate}, {"up", up}});
  TITAN_DISPATCH(swiglu_fwd, out, gate, up, n);
}
void swiglu_bwd(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                int64_t n) {
  check("swiglu_bwd", n, {{"dgate", dgate}, {"dup", dup}, {"dout", dout}, {"gate", gate}, {"up", up}});
  TITAN_DISPATCH(swiglu_bwd, dgate, dup, dout, gate, up, n);
}

}  // namespace titan::kernels::cpu
