// GEMM benchmark: titan (batch-invariant, gemm_f32 NT = C = A·Wᵀ) against OpenBLAS
// cblas_sgemm (row-major, NoTrans x Trans) in the same run, plus the machine's fp32
// FMA peak and read bandwidth as ceilings. Results: docs/benchmarks.md, "GEMM".
//
//   build-*/bench/gemm_bench [--benchmark_filter=...]
//
// impl: 0 titan gemm_f32 NT, 1 OpenBLAS, 2 titan bf16 weights, 3 titan with the weights
// repacked into panels (gemm_f32_panels; M <= 16 and M = 512).
// Counters: GFLOP/s = 2·M·N·K / time. For M <= 16 also wGB/s = weight bytes / time
// with cold weights (rotating over enough weight copies to exceed the LLC). Before
// the benchmarks, a check prints whether row i of an M = 1 call equals the same row
// inside larger calls, bit for bit, for titan and for OpenBLAS.
// Do not set OMP_PROC_BIND: it pins OpenBLAS's pthread workers to one core.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "titan/core/dtype.h"
#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/kernels/cpu/gemm.h"

#ifdef TITAN_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace {
using titan::kernels::cpu::gemm_f32;
using titan::kernels::cpu::gemm_f32_bf16;

constexpr size_t kColdBytes = size_t{256} << 20;  // > 32 MiB LLC by a wide margin

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

void set_threads(int t) {
  titan::set_num_threads(t);
#ifdef TITAN_HAVE_OPENBLAS
  openblas_set_num_threads(t);
#endif
}

// ---- ceilings: fp32 FMA throughput and read bandwidth, 1 or 2 threads.
__attribute__((target("avx2,fma"))) float fma_loop(int64_t iters) {
  __m256 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm256_set1_ps(0.001f * j);
  const __m256 a = _mm256_set1_ps(0.9999f), b = _mm256_set1_ps(0.0001f);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
  }
  __m256 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm256_add_ps(s, acc[j]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0];
}

void BM_PeakFma(benchmark::State& st) {
  const int threads = static_cast<int>(st.range(0));
  set_threads(threads);
  const int64_t iters = 1 << 22;
  for (auto _ : st) {
    titan::parallel_for(threads, [&](int64_t, int64_t) { benchmark::DoNotOptimize(fma_loop(iters)); });
  }
  st.counters["GFLOP/s"] = benchmark::Counter(1e-9 * iters * 12 * 8 * 2 * threads,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

// Sums n floats as 16 interleaved sequential streams (like the 16 weight rows that one
// GEMM panel streams), 4 vectors per stream step.
__attribute__((target("avx2"))) float sum_range(const float* p, int64_t n) {
  constexpr int S = 16;
  const int64_t len = n / S / 32 * 32;
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (int64_t i = 0; i < len; i += 32)
    for (int s = 0; s < S; ++s) {
      const float* q = p + s * len + i;
      s0 = _mm256_add_ps(s0, _mm256_loadu_ps(q));
      s1 = _mm256_add_ps(s1, _mm256_loadu_ps(q + 8));
      s2 = _mm256_add_ps(s2, _mm256_loadu_ps(q + 16));
      s3 = _mm256_add_ps(s3, _mm256_loadu_ps(q + 24));
    }
  float out[8];
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  return out[0];
}

void BM_ReadBandwidth(benchmark::State& st) {
  const int threads = static_cast<int>(st.range(0));
  set_threads(threads);
  static std::vector<float> buf = random_vec(kColdBytes / sizeof(float), 1);
  const int64_t n = static_cast<int64_t>(buf.size());
  for (auto _ : st) {
    titan::parallel_for(threads, [&](int64_t b, int64_t e) {
      benchmark::DoNotOptimize(sum_range(buf.data() + n * b / threads, n * (e - b) / threads));
    });
  }
  st.counters["GB/s"] = benchmark::Counter(1e-9 * kColdBytes, benchmark::Counter::kIsIterationInvariantRate);
}

// ---- GEMM: C(M, N) = A(M, K) · W(N, K)ᵀ.
// kTitanPanels: the weights repacked once (gemm_pack_panels, outside the timing) and
// multiplied by gemm_f32_panels, as the generator runs its layers after
// Decoder::repack_for_decode.
enum Impl { kTitan = 0, kOpenBlas = 1, kTitanBf16 = 2, kTitanPanels = 3 };

void BM_Gemm(benchmark::State& st) {
  const int64_t M = st.range(0), K = st.range(1), N = st.range(2);
  const int threads = static_cast<int>(st.range(3));
  const Impl impl = static_cast<Impl>(st.range(4));
  set_threads(threads);
  const size_t wsize = static_cast<size_t>(N * K);
  const bool cold = M <= 16;  // decode-sized: weights streamed from memory
  const size_t wbytes = wsize * (impl == kTitanBf16 ? 2 : 4);
  const size_t copies = cold ? std::max<size_t>(2, kColdBytes / wbytes + 1) : 1;
  std::vector<float> W(impl == kTitanBf16 ? 0 : wsize * copies);
  std::vector<uint16_t> Wh(impl == kTitanBf16 ? wsize * copies : 0);
  {
    std::vector<float> w0 = random_vec(wsize, 2);
    for (size_t c = 0; c < copies; ++c)
      for (size_t i = 0; i < wsize; ++i) {
        if (impl == kTitanBf16) Wh[c * wsize + i] = titan::f32_to_bf16(w0[i]);
        else W[c * wsize + i] = w0[i];
      }
  }
  std::vector<float> P;  // kTitanPanels: every copy repacked
  const size_t psize =
      impl == kTitanPanels ? static_cast<size_t>(titan::kernels::cpu::gemm_panels_size(N, K)) : 0;
  if (impl == kTitanPanels) {
    P.resize(psize * copies);
    for (size_t c = 0; c < copies; ++c)
      titan::kernels::cpu::gemm_pack_panels(N, K, W.data() + c * wsize, K, P.data() + c * psize);
  }
  std::vector<float> A = random_vec(static_cast<size_t>(M * K), 3), C(static_cast<size_t>(M * N));
  size_t c = 0;
  for (auto _ : st) {
    switch (impl) {
      case kTitan:
        gemm_f32(M, N, K, A.data(), K, W.data() + c * wsize, K, true, C.data(), N, false);
        break;
      case kTitanPanels:
        titan::kernels::cpu::gemm_f32_panels(M, N, K, A.data(), K, P.data() + c * psize, C.data(),
                                             N, false);
        break;
      case kTitanBf16:
        gemm_f32_bf16(M, N, K, A.data(), K, Wh.data() + c * wsize, K, true, C.data(), N, false);
        break;
      case kOpenBlas:
#ifdef TITAN_HAVE_OPENBLAS
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(M), static_cast<int>(N),
                    static_cast<int>(K), 1.f, A.data(), static_cast<int>(K), W.data() + c * wsize,
                    static_cast<int>(K), 0.f, C.data(), static_cast<int>(N));
#endif
        break;
    }
    benchmark::ClobberMemory();
    c = (c + 1) % copies;
  }
  st.counters["GFLOP/s"] = benchmark::Counter(2e-9 * M * N * K, benchmark::Counter::kIsIterationInvariantRate);
  if (cold)
    st.counters["wGB/s"] = benchmark::Counter(1e-9 * wbytes, benchmark::Counter::kIsIterationInvariantRate);
}

void GemmArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "K", "N", "thr", "impl"});
  for (auto [K, N] : {std::pair<int, int>{512, 1536}, {1024, 4096}, {4096, 1024}})
    for (int M : {1, 8, 16, 128, 512, 2048})
      for (int t : {1, 2}) {
        b->Args({M, K, N, t, kTitan});
#ifdef TITAN_HAVE_OPENBLAS
        b->Args({M, K, N, t, kOpenBlas});
#endif
        if (M == 1) b->Args({M, K, N, t, kTitanBf16});
        if (M <= 16 || M == 512) b->Args({M, K, N, t, kTitanPanels});
      }
}

BENCHMARK(BM_PeakFma)->ArgName("thr")->Arg(1)->Arg(2)->UseRealTime()->MinTime(0.2);
BENCHMARK(BM_ReadBandwidth)->ArgName("thr")->Arg(1)->Arg(2)->UseRealTime()->MinTime(0.5);
BENCHMARK(BM_Gemm)->Apply(GemmArgs)->UseRealTime()->MinTime(0.3)->Unit(benchmark::kMillisecond);

// ---- bitwise check: row i alone (M = 1) vs the same row inside M = 16, 128, 512.
template <typename Fn>
bool rows_equal(Fn gemm, int64_t K, int64_t N) {
  std::vector<float> W = random_vec(static_cast<size_t>(N * K), 11);
  std::vector<float> A = random_vec(static_cast<size_t>(512 * K), 12);
  bool all = true;
  for (int64_t M : {16, 128, 512}) {
    std::vector<float> C(static_cast<size_t>(M * N)), c1(static_cast<size_t>(N));
    gemm(M, A.data(), W.data(), C.data());
    for (int64_t i : {int64_t{0}, M / 2 + 1, M - 1}) {
      gemm(1, A.data() + i * K, W.data(), c1.data());
      all = all && std::memcmp(c1.data(), C.data() + i * N, sizeof(float) * N) == 0;
    }
  }
  return all;
}

void report_row_invariance() {
  std::printf("ISA: %s\n", std::string(titan::kernels::cpu::isa_name(titan::kernels::cpu::cpu_isa())).c_str());
#ifdef TITAN_HAVE_OPENBLAS
  std::printf("OpenBLAS: %s | core %s\n", openblas_get_config(), openblas_get_corename());
#endif
  for (auto [K, N] : {std::pair<int64_t, int64_t>{512, 1536}, {1024, 4096}, {4096, 1024}})
    for (int t : {1, 2}) {
      set_threads(t);
      const bool ti = rows_equal([&](int64_t M, const float* A, const float* W, float* C) {
        gemm_f32(M, N, K, A, K, W, K, true, C, N, false);
      }, K, N);
      std::printf("row invariance K=%ld N=%ld threads=%d: titan M=1 row == row in M=16/128/512: %s",
                  static_cast<long>(K), static_cast<long>(N), t, ti ? "yes" : "NO");
#ifdef TITAN_HAVE_OPENBLAS
      const bool ob = rows_equal([&](int64_t M, const float* A, const float* W, float* C) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(M), static_cast<int>(N),
                    static_cast<int>(K), 1.f, A, static_cast<int>(K), W, static_cast<int>(K), 0.f, C,
                    static_cast<int>(N));
      }, K, N);
      std::printf(" | openblas: %s", ob ? "yes" : "NO");
#endif
      std::printf("\n");
    }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  report_row_invariance();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
