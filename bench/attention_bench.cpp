// Attention benchmark: titan's flash-style causal attention (fp32), forward and
// backward tokens/s on one packed sequence, decode latency against a paged cache,
// the KV block size trade-off, and the machine's fp32 FMA peak as the ceiling
// measured in the same run. Results: docs/benchmarks.md, "Attention".
//
//   build-*/bench/attention_bench [--benchmark_filter=...] [--no_memory]
//
// Before the benchmarks (unless --no_memory) a table gives, per (Dh, T), the peak
// resident memory of one forward + backward in a fresh child process (fork):
// VmHWM after the call minus VmRSS before it (inputs/outputs already allocated), next
// to what one T x T fp32 score matrix per head would take, to show the scratch grows
// linearly with T.
//
// Peer in the same run: the composed forward (gemm_f32 for Q K^T and P V with a
// materialised T x T matrix per head, row softmax with the shared vexp), and the
// fp32 FMA peak.
//
// Counters: tok/s = query tokens / s; GFLOP/s with causal FLOPs: forward
// 4 * Dh * H * T(T+1)/2 (QK^T and PV over the visible pairs), backward 2.5x that
// (QK^T recompute, dP, dV, dK, dQ); decode: us per token and KV GB/s read.
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/attention.h"
#include "titan/kernels/cpu/gemm.h"
#include "titan/kernels/cpu/vmath.h"

namespace {
using namespace titan::kernels::cpu;

constexpr int kH = 8, kHkv = 4;

// Uniform in [-1.5, 1.5) from a 64-bit LCG (fast: the 8192-token inputs are large).
std::vector<float> random_vec(size_t n, uint32_t seed) {
  uint64_t s = 0x9E3779B97F4A7C15ull * (seed + 1);
  std::vector<float> v(n);
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = 3.0f * static_cast<float>(s >> 40) / 16777216.0f - 1.5f;
  }
  return v;
}

struct Problem {
  int Dh;
  int T;
  std::vector<float> q, k, v, out, lse, dout, dq, dk, dv;
  std::vector<int32_t> cu;
  Problem(int Dh_, int T_) : Dh(Dh_), T(T_) {
    const size_t nq = size_t{1} * T * kH * Dh, nk = size_t{1} * T * kHkv * Dh;
    q = random_vec(nq, 1);
    k = random_vec(nk, 2);
    v = random_vec(nk, 3);
    dout = random_vec(nq, 4);
    out.assign(nq, 0.f);
    lse.assign(size_t{1} * T * kH, 0.f);
    dq.assign(nq, 0.f);
    dk.assign(nk, 0.f);
    dv.assign(nk, 0.f);
    cu = {0, T};
  }
  void fwd(const AttentionParams& p = {}) {
    attention_varlen_fwd(out.data(), lse.data(), q.data(), k.data(), v.data(), cu.data(), 1, T, kH,
                         kHkv, Dh, p);
  }
  void bwd() {
    attention_varlen_bwd(dq.data(), dk.data(), dv.data(), nullptr, dout.data(), out.data(),
                         lse.data(), q.data(), k.data(), v.data(), cu.data(), 1, T, kH, kHkv, Dh);
  }
  double fwd_flops() const { return 4.0 * Dh * kH * (double(T) * (T + 1) / 2); }
};

// ---- ceiling: fp32 FMA throughput (12 independent ymm chains per thread).
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
  titan::set_num_threads(threads);
  const int64_t iters = 1 << 22;
  for (auto _ : st)
    titan::parallel_for(threads, [&](int64_t, int64_t) { benchmark::DoNotOptimize(fma_loop(iters)); });
  st.counters["GFLOP/s"] = benchmark::Counter(1e-9 * iters * 12 * 8 * 2 * threads,
                                              benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_PeakFma)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PeakFma)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// ---- training path: one sequence of T tokens, H = 8, Hkv = 4.
void BM_AttnFwd(benchmark::State& st) {
  titan::set_num_threads(static_cast<int>(st.range(3)));
  Problem pb(static_cast<int>(st.range(0)), static_cast<int>(st.range(1)));
  AttentionParams p;
  p.block_size = st.range(2) > 0 ? static_cast<int>(st.range(2)) : kKvBlockSize;
  for (auto _ : st) pb.fwd(p);
  st.counters["tok/s"] = benchmark::Counter(pb.T, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GFLOP/s"] =
      benchmark::Counter(1e-9 * pb.fwd_flops(), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_AttnBwd(benchmark::State& st) {
  titan::set_num_threads(static_cast<int>(st.range(3)));
  Problem pb(static_cast<int>(st.range(0)), static_cast<int>(st.range(1)));
  pb.fwd();
  for (auto _ : st) pb.bwd();
  st.counters["tok/s"] = benchmark::Counter(pb.T, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GFLOP/s"] = benchmark::Counter(1e-9 * 2.5 * pb.fwd_flops(),
                                              benchmark::Counter::kIsIterationInvariantRate);
}

// threads = 1: rates per CPU second of the (only) working thread, robust to other
// load on the shared machine; threads = 2: wall-clock rates.
void train_args(benchmark::internal::Benchmark* b, int threads) {
  b->ArgNames({"Dh", "T", "B", "threads"});
  for (int Dh : {64, 128})
    for (int T : {512, 2048, 8192}) b->Args({Dh, T, 0, threads});
  b->Unit(benchmark::kMillisecond)->MinTime(0.3);
  if (threads > 1) b->UseRealTime();
}
BENCHMARK(BM_AttnFwd)->Apply([](auto* b) { train_args(b, 1); });
BENCHMARK(BM_AttnFwd)->Apply([](auto* b) { train_args(b, 2); });
BENCHMARK(BM_AttnBwd)->Apply([](auto* b) { train_args(b, 1); });
BENCHMARK(BM_AttnBwd)->Apply([](auto* b) { train_args(b, 2); });
// KV block size trade-off (forward, Dh = 64 and 128, T = 2048, one thread).
BENCHMARK(BM_AttnFwd)
    ->ArgNames({"Dh", "T", "B", "threads"})
    ->ArgsProduct({{64, 128}, {2048}, {16, 32, 64}, {1}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.3);

// ---- peer: the composed (materialised) forward, one head at a time: S = Q K^T with
// the same batch-invariant gemm_f32, causal softmax per row (shared vexp), O = P V.
// It does the full T x T products (2x the causal FLOPs) and holds a T x T matrix.
void BM_AttnComposedFwd(benchmark::State& st) {
  titan::set_num_threads(static_cast<int>(st.range(3)));
  Problem pb(static_cast<int>(st.range(0)), static_cast<int>(st.range(1)));
  const int T = pb.T, Dh = pb.Dh, G = kH / kHkv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dh));
  std::vector<float> S(size_t{1} * T * T), P(S.size()), Oh(size_t{1} * T * Dh);
  for (auto _ : st) {
    for (int h = 0; h < kH; ++h) {
      const int hk = h / G;
      gemm_f32(T, T, Dh, pb.q.data() + h * Dh, kH * Dh, pb.k.data() + hk * Dh, kHkv * Dh, true,
               S.data(), T, false);
      for (int i = 0; i < T; ++i) {
        float* s = S.data() + size_t{1} * i * T;
        float m = -INFINITY;
        for (int j = 0; j <= i; ++j) m = std::max(m, s[j] *= scale);
        for (int j = 0; j <= i; ++j) s[j] -= m;
        float* p = P.data() + size_t{1} * i * T;
        exp_f32(p, s, i + 1);
        float l = 0.f;
        for (int j = 0; j <= i; ++j) l += p[j];
        const float inv = 1.0f / l;
        for (int j = 0; j <= i; ++j) p[j] *= inv;
        std::fill(p + i + 1, p + T, 0.0f);
      }
      gemm_f32(T, Dh, T, P.data(), T, pb.v.data() + hk * Dh, kHkv * Dh, false, Oh.data(), Dh,
               false);
      for (int i = 0; i < T; ++i)
        std::copy(Oh.data() + size_t{1} * i * Dh, Oh.data() + size_t{1} * (i + 1) * Dh,
                  pb.out.data() + (size_t{1} * i * kH + h) * Dh);
    }
  }
  st.counters["tok/s"] = benchmark::Counter(pb.T, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GFLOP/s"] =
      benchmark::Counter(1e-9 * pb.fwd_flops(), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AttnComposedFwd)
    ->ArgNames({"Dh", "T", "B", "threads"})
    ->ArgsProduct({{64, 128}, {512, 2048}, {0}, {1}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.3);

// ---- decode: one query token (all H heads) against a paged cache of L tokens.
void BM_AttnDecode(benchmark::State& st) {
  const int Dh = static_cast<int>(st.range(0)), L = static_cast<int>(st.range(1));
  const int threads = static_cast<int>(st.range(2));
  titan::set_num_threads(threads);
  const int B = kKvBlockSize;
  const int nb = (L + B - 1) / B;
  std::vector<float> kc(size_t{1} * nb * kHkv * Dh * B, 0.f), vc(kc.size(), 0.f);
  {
    const std::vector<float> k = random_vec(size_t{1} * L * kHkv * Dh, 2),
                             v = random_vec(size_t{1} * L * kHkv * Dh, 3);
    std::vector<int32_t> slots(L);
    for (int t = 0; t < L; ++t) slots[t] = t;
    kv_cache_write(kc.data(), vc.data(), k.data(), v.data(), slots.data(), L, kHkv, Dh, nb);
  }
  std::vector<int32_t> table(nb);
  for (int b = 0; b < nb; ++b) table[b] = b;
  const std::vector<float> q = random_vec(size_t{1} * kH * Dh, 1);
  std::vector<float> out(size_t{1} * kH * Dh);
  const int32_t seq = 0, pos = L - 1;
  for (auto _ : st)
    attention_paged_fwd(out.data(), nullptr, q.data(), kc.data(), vc.data(), table.data(), &seq,
                        &pos, 1, kH, kHkv, Dh, 1, nb, nb);
  st.counters["KV_GB/s"] = benchmark::Counter(2e-9 * L * kHkv * Dh * sizeof(float),
                                              benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AttnDecode)
    ->ArgNames({"Dh", "L", "threads"})
    ->ArgsProduct({{64, 128}, {512, 2048, 8192, 32768}, {1}})
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.2);
BENCHMARK(BM_AttnDecode)
    ->ArgNames({"Dh", "L", "threads"})
    ->ArgsProduct({{64, 128}, {512, 2048, 8192, 32768}, {2}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.2);

// ---- memory: peak RSS of one fwd + bwd in a fresh process per size.
long status_kib(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(key);
  while (std::getline(f, line))
    if (line.compare(0, n, key) == 0) return std::stol(line.substr(n + 1));
  return -1;
}

void memory_table() {
  std::printf("Peak memory of one forward + backward (H=%d, Hkv=%d, one sequence; fresh process per row)\n",
              kH, kHkv);
  std::printf("%4s %6s %14s %16s %22s\n", "Dh", "T", "inputs MiB", "kernel peak MiB",
              "T x T x H scores MiB");
  std::fflush(stdout);
  for (int Dh : {64, 128})
    for (int T : {512, 2048, 8192}) {
      const pid_t pid = fork();
      if (pid == 0) {
        titan::set_num_threads(2);
        Problem pb(Dh, T);
        std::ofstream("/proc/self/clear_refs") << "5";  // reset VmHWM to the current RSS
        const long rss0 = status_kib("VmRSS:");
        pb.fwd();
        pb.bwd();
        const long hwm = status_kib("VmHWM:");
        const double inputs = (pb.q.size() * 5.0 + pb.k.size() * 4.0 + pb.lse.size()) * 4 / 1048576;
        std::printf("%4d %6d %14.1f %16.1f %22.0f\n", Dh, T, inputs, (hwm - rss0) / 1024.0,
                    double(T) * T * kH * 4 / 1048576);
        std::fflush(stdout);
        _exit(0);
      }
      int status = 0;
      waitpid(pid, &status, 0);
    }
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  bool memory = true;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no_memory") == 0) memory = false;
    else args.push_back(argv[i]);
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  if (memory) memory_table();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
