// bf16 GEMM benchmark: titan's gemm_bf16 (bf16 inputs, fp32 accumulation, the chain of
// titan/kernels/cpu/bf16.h) on its three paths against the fp32 gemm_f32 in the same
// run, C = A · Wᵀ with W (N, K) in the nn.Linear layout. Results: docs/benchmarks.md,
// "bf16".
//
//   build/bench/gemm_bf16_bench [--benchmark_filter=...]
//
// impl: 0 gemm_f32 (fp32), 1 gemm_bf16 VDPBF16PS (where the CPU has it), 2 gemm_bf16
// AVX-512 emulation, 3 gemm_bf16 AVX2 emulation, 4 gemm_f32_panels (fp32 repacked
// weights), 5 gemm_bf16_panels (bf16 repacked weights, the process's default path).
// Counters: GFLOP/s = 2·M·N·K / time; for M <= 16 also wGB/s = weight bytes / time with
// cold weights (rotating over enough weight copies to exceed the LLC).
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <random>
#include <vector>

#include "titan/core/dtype.h"
#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/bf16.h"
#include "titan/kernels/cpu/gemm.h"

namespace {
namespace kc = titan::kernels::cpu;
constexpr size_t kColdBytes = size_t{256} << 20;

void BM_gemm(benchmark::State& st) {
  const int impl = static_cast<int>(st.range(0));
  const int64_t M = st.range(1), K = st.range(2), N = st.range(3);
  titan::set_num_threads(static_cast<int>(st.range(4)));
  if (impl == 1 && !kc::bf16_instruction_available()) {
    st.SkipWithError("no AVX512_BF16");
    return;
  }
  __builtin_cpu_init();
  if (impl == 2 && !__builtin_cpu_supports("avx512bw")) {
    st.SkipWithError("no AVX-512");
    return;
  }
  const bool bf16 = impl == 1 || impl == 2 || impl == 3 || impl == 5;
  const size_t wbytes = static_cast<size_t>(N * K) * (bf16 ? 2 : 4);
  const int copies = M <= 16 ? static_cast<int>(std::max<size_t>(1, kColdBytes / wbytes)) : 1;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> A(static_cast<size_t>(M * K)), C(static_cast<size_t>(M * N));
  for (auto& x : A) x = u(rng);
  std::vector<uint16_t> Ah(A.size());
  kc::cast_f32_to_bf16(A.data(), Ah.data(), static_cast<int64_t>(A.size()));
  std::vector<std::vector<float>> Wf;
  std::vector<std::vector<uint16_t>> Wh;
  std::vector<std::vector<uint32_t>> Wp;
  for (int c = 0; c < copies; ++c) {
    std::vector<float> w(static_cast<size_t>(N * K));
    for (auto& x : w) x = u(rng);
    if (impl == 4) {
      std::vector<float> p(static_cast<size_t>(kc::gemm_panels_size(N, K)));
      kc::gemm_pack_panels(N, K, w.data(), K, p.data());
      Wf.push_back(std::move(p));
    } else if (impl == 0) {
      Wf.push_back(std::move(w));
    } else {
      std::vector<uint16_t> h(w.size());
      kc::cast_f32_to_bf16(w.data(), h.data(), static_cast<int64_t>(w.size()));
      if (impl == 5) {
        std::vector<uint32_t> p(static_cast<size_t>(kc::gemm_bf16_panels_size(N, K)));
        kc::gemm_bf16_pack_panels(N, K, h.data(), K, p.data());
        Wp.push_back(std::move(p));
      } else {
        Wh.push_back(std::move(h));
      }
    }
  }
  int c = 0;
  for (auto _ : st) {
    switch (impl) {
      case 0: kc::gemm_f32(M, N, K, A.data(), K, Wf[c].data(), K, true, C.data(), N, false); break;
      case 1: kc::gemm_bf16_on(kc::Isa::avx512, kc::Bf16Dot::instruction, M, N, K, Ah.data(), K, false,
                               Wh[c].data(), K, true, C.data(), N, false); break;
      case 2: kc::gemm_bf16_on(kc::Isa::avx512, kc::Bf16Dot::emulation, M, N, K, Ah.data(), K, false,
                               Wh[c].data(), K, true, C.data(), N, false); break;
      case 3: kc::gemm_bf16_on(kc::Isa::avx2, kc::Bf16Dot::emulation, M, N, K, Ah.data(), K, false,
                               Wh[c].data(), K, true, C.data(), N, false); break;
      case 4: kc::gemm_f32_panels(M, N, K, A.data(), K, Wf[c].data(), C.data(), N, false); break;
      default: kc::gemm_bf16_panels(M, N, K, Ah.data(), K, Wp[c].data(), C.data(), N, false); break;
    }
    benchmark::DoNotOptimize(C.data());
    c = (c + 1) % copies;
  }
  const double flops = 2.0 * static_cast<double>(M * N * K);
  st.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  if (M <= 16)
    st.counters["wGB/s"] = benchmark::Counter(static_cast<double>(wbytes) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

void shapes(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2})
    for (int impl : {0, 1, 2, 3, 4, 5})
      for (int64_t M : {1, 8, 128, 512}) {
        if ((impl == 4 || impl == 5) && M > 8) continue;  // the decode layouts
        b->Args({impl, M, 1024, 4096, threads});
      }
}
BENCHMARK(BM_gemm)->Apply(shapes)->UseRealTime()->MinTime(0.3);

// The linear products of a `small` training step (bench/train_bf16_bench.sh: 8 x 512
// tokens, dim 512, ffn 1536) in their three layouts, fp32 gemm_f32 against gemm_bf16 on
// the process's default path: layout 0 forward Y = X · Wᵀ (M = tokens, W (N, K)),
// 1 dX = dY · W (B (K, N) "NN"), 2 dW = dYᵀ · X (A stored (K = tokens, M), B (K, N)).
// args: bf16, layout, M, N, K, threads. On a loaded shared machine compare the CPU
// column of the 1-thread runs (the work itself) rather than the wall time.
void BM_train(benchmark::State& st) {
  const bool bf16 = st.range(0) != 0;
  const int layout = static_cast<int>(st.range(1));
  const int64_t M = st.range(2), N = st.range(3), K = st.range(4);
  titan::set_num_threads(static_cast<int>(st.range(5)));
  const bool at = layout == 2, bt = layout == 0;
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> A(static_cast<size_t>(M * K)), B(static_cast<size_t>(N * K)), C(static_cast<size_t>(M * N));
  for (auto& x : A) x = u(rng);
  for (auto& x : B) x = u(rng);
  std::vector<uint16_t> Ah(A.size()), Bh(B.size());
  kc::cast_f32_to_bf16(A.data(), Ah.data(), static_cast<int64_t>(A.size()));
  kc::cast_f32_to_bf16(B.data(), Bh.data(), static_cast<int64_t>(B.size()));
  const int64_t lda = at ? M : K, ldb = bt ? K : N;
  for (auto _ : st) {
    if (bf16)
      kc::gemm_bf16(M, N, K, Ah.data(), lda, at, Bh.data(), ldb, bt, C.data(), N, false);
    else if (at)
      kc::gemm_f32_tn(M, N, K, A.data(), lda, B.data(), ldb, C.data(), N, false);
    else
      kc::gemm_f32(M, N, K, A.data(), lda, B.data(), ldb, bt, C.data(), N, false);
    benchmark::DoNotOptimize(C.data());
  }
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(M * N * K) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}
void train_shapes(benchmark::internal::Benchmark* b) {
  const int64_t T = 4096;
  // (out, in) of wq / wo, wk / wv, w1 / w3, w2
  const int64_t lin[][2] = {{512, 512}, {256, 512}, {1536, 512}, {512, 1536}};
  for (int threads : {1, 2})
    for (const auto& w : lin)
      for (int bf16 : {0, 1}) {
        b->Args({bf16, 0, T, w[0], w[1], threads});
        b->Args({bf16, 1, T, w[1], w[0], threads});
        b->Args({bf16, 2, w[0], w[1], T, threads});
      }
}
BENCHMARK(BM_train)->Apply(train_shapes)->UseRealTime()->MinTime(0.3);

// One core's peak, the denominator of the bf16 MFU figures: 16 independent chains of
// VDPBF16PS (impl 1: 16 lanes x 2 products = 64 FLOP each) or of fp32 FMA (impl 0: 32
// FLOP each, the fp32 peak of config::kPeakFlopsPerCoreAvx512), GFLOP/s per CPU second
// (so a shared machine's load does not lower it).
[[gnu::target("avx512f,avx512bf16,fma")]] float peak_loop(bool dp, int64_t iters) {
  __m512 acc[16];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const __m512 x = _mm512_set1_ps(1.0f), y = _mm512_set1_ps(0x1p-30f);
  const __m512bh xa = (__m512bh)_mm512_set1_epi32(0x3f803f80), ya = (__m512bh)_mm512_set1_epi32(0x30803080);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) {
      acc[i] = dp ? _mm512_dpbf16_ps(acc[i], xa, ya) : _mm512_fmadd_ps(x, y, acc[i]);
      asm volatile("" : "+v"(acc[i]));  // keeps every chain (no folding of the loop)
    }
  }
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}
void BM_peak(benchmark::State& st) {
  const bool dp = st.range(0) != 0;
  if (dp ? !kc::bf16_instruction_available() : !__builtin_cpu_supports("avx512f")) {
    st.SkipWithError("no AVX-512 / AVX512_BF16");
    return;
  }
  constexpr int64_t kIters = 1 << 20;
  for (auto _ : st) benchmark::DoNotOptimize(peak_loop(dp, kIters));
  st.counters["GFLOP/s"] = benchmark::Counter(16.0 * kIters * (dp ? 64 : 32) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_peak)->Arg(0)->Arg(1)->MinTime(0.3);

}  // namespace

BENCHMARK_MAIN();
