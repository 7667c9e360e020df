#include "titan/kernels/cpu/dispatch.h"

#include <cstdlib>
#include <string>

#include "titan/core/error.h"

namespace titan::kernels::cpu {

namespace {
Isa detect() {
  __builtin_cpu_init();
  const bool has512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  const bool has2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  TITAN_CHECK(has2, "titan needs a CPU with AVX2 and FMA");
  if (const char* env = std::getenv("TITAN_ISA")) {
    std::string s(env);
    if (s == "avx2") return Isa::avx2;
    if (s == "avx512") {
      TITAN_CHECK(has512, "TITAN_ISA=avx512 but this CPU lacks AVX-512 (F/BW/DQ/VL)");
      return Isa::avx512;
    }
    fail("TITAN_ISA='{}' is not a known ISA (expected avx2 or avx512)", s);
  }
  return has512 ? Isa::avx512 : Isa::avx2;
}
}  // namespace

Isa cpu_isa() {
  static const Isa isa = detect();
  return isa;
}

std::string_view isa_name(Isa isa) { return isa == Isa::avx512 ? "avx512" : "avx2"; }

}  // namespace titan::kernels::cpu
