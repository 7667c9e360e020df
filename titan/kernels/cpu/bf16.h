// bf16 kernels: vector casts and the bf16 GEMM with fp32 accumulation.
//
// ---- Casts. fp32 -> bf16 is the one rounding rule of titan (titan::f32_to_bf16 in
// titan/core/dtype.h): round to nearest, ties to even, on the bit pattern; subnormals
// are rounded like any other value (kept, not flushed); a NaN keeps its sign and upper
// payload bits and gets the quiet bit set; overflow past the largest bf16 gives inf.
// cast_f32_to_bf16 gives exactly those bits (tests compare it with the scalar rule).
// bf16 -> fp32 is exact (the 16 bits become the upper half of the fp32 pattern).
//
// ---- bf16 GEMM. C(M, N) [+]= op(A)(M, K) · op(B)(K, N), A and B bf16 (raw uint16
// bits), C fp32. Every C[m][n] is one fp32 chain over the K index in pairs, the pair's
// odd element first (the order of Intel's VDPBF16PS pseudo-code):
//     c = accumulate ? C[m][n] : +0.0f
//     for p = 0 .. ceil(K / 2) - 1:
//       c = fma*(a[2p + 1], b[2p + 1], c)
//       c = fma*(a[2p],     b[2p],     c)
// with a[k] = A[m][k], b[k] = B[k][n] (as bf16 widened exactly to fp32), a[K] = b[K] =
// +0 when K is odd, and fma* the exactly rounded fp32 fused multiply-add (round to
// nearest even) with
//   - DAZ: each input (a, b and c) that is subnormal is read as a zero of its sign;
//   - FTZ: a result that is tiny after rounding (|r| < 2^-126 with the exponent range
//     unbounded) is replaced by a zero of its sign.
// This is what VDPBF16PS computes on this project's AVX512_BF16 machine (measured on
// 3 * 10^7 random inputs, subnormals, infinities and NaNs included, against the chain
// above done by MXCSR DAZ|FTZ FMAs: zero differing bits, NaN payloads included; see
// tests/kernels/gemm_bf16_test.cpp, which checks it on every run where the instruction
// exists). Every path computes exactly this chain:
//   - instruction: VDPBF16PS on AVX-512 CPUs with AVX512_BF16;
//   - emulation: bf16 widened to fp32 while packing, then one FMA per element of the
//     pair in the order above, with MXCSR DAZ|FTZ set for the duration of the kernel
//     (and restored), on AVX-512 without AVX512_BF16 and on AVX2.
// Rows are never combined, so row m of C has the same bits whatever M is, wherever the
// row sits, and whatever the thread count (batch invariance, DESIGN.md §1.2); the
// AVX-512 instruction, AVX-512 emulation and AVX2 emulation give the same bits (only a
// NaN result's payload could in principle depend on the instruction form).
//
// Layout: a_trans = false: A is (M, K) row stride lda >= K; true: A stored (K, M),
// lda >= M (the weight-gradient product dW = dYᵀ · X). b_trans = true: B is (N, K),
// ldb >= K (nn.Linear weight, "NT"); false: B is (K, N), ldb >= N. ldc >= N.
// Errors (titan::Error naming the function and argument): negative sizes, short leading
// dimensions, null pointers for a non-empty problem, an unavailable path or ISA.
// K = 0 sets C to 0 (or leaves it when accumulating).
//
// Implementation: titan/kernels/cpu/isa/gemm_bf16.cpp (B packed with vector moves into
// NR-wide panels of K pairs: all of it at once when small, else per KC x NC block shared
// by the threads; A packed per K chunk in MR-row panels, or read in place by the
// instruction kernel when row-major; an MR x NR tile of C in registers; Goto & van de
// Geijn, ACM TOMS 34(3), 2008). Packing moves bits only: the chain above is unchanged.
#pragma once
#include <cstdint>
#include <string_view>

#include "titan/kernels/cpu/dispatch.h"

namespace titan::kernels::cpu {

// y[i] = f32_to_bf16(x[i]) / x[i] = bf16_to_f32(y[i]) for i < n (n >= 0).
void cast_f32_to_bf16(const float* x, uint16_t* y, int64_t n);
void cast_bf16_to_f32(const uint16_t* x, float* y, int64_t n);
// x[i] = bf16_to_f32(f32_to_bf16(x[i])) in place: fp32 storage of bf16 values.
void round_to_bf16(float* x, int64_t n);

// How the pair products are computed (the bits are the same either way).
enum class Bf16Dot { instruction, emulation };
// True when this CPU has AVX512_BF16 (and AVX-512 F/BW/DQ/VL).
bool bf16_instruction_available();
// The path gemm_bf16 takes in this process: instruction when cpu_isa() is avx512 and
// the CPU has AVX512_BF16, else emulation. TITAN_BF16_DOT=emulation forces the
// emulation (TITAN_BF16_DOT=instruction is refused where the instruction is missing).
Bf16Dot bf16_dot();
std::string_view bf16_dot_name(Bf16Dot d);

void gemm_bf16(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool a_trans,
               const uint16_t* B, int64_t ldb, bool b_trans, float* C, int64_t ldc,
               bool accumulate);

// The same GEMM on an explicit ISA build and path (tests and benchmarks compare them
// in one process). Throws titan::Error when the CPU lacks the ISA or the instruction,
// or for Isa::avx2 with Bf16Dot::instruction.
void gemm_bf16_on(Isa isa, Bf16Dot dot, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                  int64_t lda, bool a_trans, const uint16_t* B, int64_t ldb, bool b_trans,
                  float* C, int64_t ldc, bool accumulate);

// Weights repacked for decode in bf16 (half the bytes of the fp32 panels of gemm.h):
// W (N, K) bf16 (the nn.Linear layout) as ceil(N / w) panels, each ceil(K / 2) rows of
// w dwords, dword (p, n) = W[n][2p] | W[n][2p + 1] << 16 (zero past N and K);
// w = gemm_bf16_panel_width() (16 on AVX2, 32 on AVX-512; fixed for the process, so a
// packed buffer is never saved or moved between processes). gemm_bf16_panels(.., A,
// .., Bp, ..) gives the same bits as gemm_bf16(.., A, .., W, K, b_trans = true, ..):
// the same chain per element, every weight streamed once in address order.
//   gemm_bf16_panels_size: dwords of the packed buffer, ceil(N / w) * w * ceil(K / 2).
// Errors (titan::Error): negative sizes, ldw < K, lda < K, null pointers for a
// non-empty problem.
int64_t gemm_bf16_panel_width();
int64_t gemm_bf16_panels_size(int64_t N, int64_t K);
void gemm_bf16_pack_panels(int64_t N, int64_t K, const uint16_t* W, int64_t ldw, uint32_t* dst);
void gemm_bf16_panels(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                      const uint32_t* Bp, float* C, int64_t ldc, bool accumulate);

}  // namespace titan::kernels::cpu
