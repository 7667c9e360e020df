// Runtime ISA selection for CPU kernels. Every file in titan/kernels/cpu/isa/ is
// compiled twice (namespaces avx512 and avx2, see CMakeLists.txt); the public kernel
// entry points call TITAN_DISPATCH to pick one. The choice is made once per process
// (env TITAN_ISA=avx2|avx512 overrides), so trainer and generator always run the
// same arithmetic. The two builds also give the same bits as each other: reductions
// across lanes use one 16-lane vector on both (isa/simd.h), so a run under
// TITAN_ISA=avx2 equals the AVX-512 run bit for bit (tests/kernels/isa_parity_test.cpp,
// tests/train/trainer_isa_test.cpp).
#pragma once
#include <string_view>

namespace titan::kernels::cpu {

enum class Isa { avx2, avx512 };

// The ISA chosen for this process. Throws titan::Error if the CPU lacks AVX2+FMA
// or TITAN_ISA names an ISA the CPU does not support.
Isa cpu_isa();
std::string_view isa_name(Isa isa);

}  // namespace titan::kernels::cpu

// Calls avx512::fn(args...) or avx2::fn(args...) in titan::kernels::cpu.
#define TITAN_DISPATCH(fn, ...)                                                      \
  (::titan::kernels::cpu::cpu_isa() == ::titan::kernels::cpu::Isa::avx512            \
       ? ::titan::kernels::cpu::avx512::fn(__VA_ARGS__)                               \
       : ::titan::kernels::cpu::avx2::fn(__VA_ARGS__))

// Declares a kernel in both ISA namespaces: TITAN_DECLARE_ISA(void, gemm_f32, (args...)).
#define TITAN_DECLARE_ISA(ret, fn, params)      \
  namespace titan::kernels::cpu::avx512 {        \
  ret fn params;                                 \
  }                                              \
  namespace titan::kernels::cpu::avx2 {          \
  ret fn params;                                 \
  }
