// Vectorised elementwise math over contiguous fp32 arrays (per ISA).
#include "titan/kernels/cpu/isa/simd.h"

namespace titan::kernels::cpu::TITAN_ISA_NS {
using namespace simd;

void exp_f32(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + W <= n; i += W) store(y + i, vexp(load(x + i)));
  if (i < n) store_n(y + i, vexp(load_n(x + i, static_cast<int>(n - i))), static_cast<int>(n - i));
}

}  // namespace titan::kernels::cpu::TITAN_ISA_NS
