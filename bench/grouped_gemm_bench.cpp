// Grouped expert GEMM (kernels/cpu/grouped_gemm.h, the MoE expert FFN) against the dense
// GEMM of the same total FLOPs (gemm_f32 NT on all rows with one weight).
// Results: docs/benchmarks.md, "Grouped expert GEMM".
//
//   build/bench/grouped_gemm_bench [--benchmark_filter=...]
//
// Shape: R routed rows (tokens x top-k; 2048, or 16384 as in a training step of 2k
// tokens x top-8) of D = 1024 into N = 512 outputs (an expert's w1), spread evenly over
// E = 8 or 64 experts (E = 1 is the dense GEMM). Counter GFLOP/s = 2 R N D / wall time;
// on a loaded machine divide 2 R N D by the CPU column instead (threads = 1: the
// calling thread does all the work). Args: {E, threads, R}.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/gemm.h"
#include "titan/kernels/cpu/grouped_gemm.h"

namespace {

constexpr int64_t kD = 1024, kN = 512;

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

void BM_Expert(benchmark::State& st) {
  const int64_t E = st.range(0);
  titan::set_num_threads(static_cast<int>(st.range(1)));
  const int64_t kRows = st.range(2);
  const std::vector<float> A = random_vec(static_cast<size_t>(kRows * kD), 1);
  const std::vector<float> W = random_vec(static_cast<size_t>(E * kN * kD), 2);
  std::vector<float> C(static_cast<size_t>(kRows * kN));
  std::vector<int64_t> off(static_cast<size_t>(E + 1));
  for (int64_t e = 0; e <= E; ++e) off[static_cast<size_t>(e)] = e * kRows / E;
  for (auto _ : st) {
    if (E == 1)
      titan::kernels::cpu::gemm_f32(kRows, kN, kD, A.data(), kD, W.data(), kD, true, C.data(), kN, false);
    else
      titan::kernels::cpu::grouped_gemm_f32(off, kN, kD, A.data(), kD, W.data(), true, C.data(), kN);
    benchmark::DoNotOptimize(C.data());
  }
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * kRows * kN * kD, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Expert)->ArgNames({"E", "threads", "R"})
    ->ArgsProduct({{1, 8, 64}, {1}, {2048, 16384}})
    ->ArgsProduct({{1, 8, 64}, {2}, {2048}})
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.3);

}  // namespace

BENCHMARK_MAIN();
