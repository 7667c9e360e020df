// Row kernels: RMSNorm, log_softmax over a 32000 vocabulary, and the fused chunked
// cross-entropy forward + backward (T=2048, D=512, V=32000), in tokens/s, each with a
// peer measured in the same run:
//   - RMSNorm: memcpy of the same bytes (the memory-bandwidth ceiling);
//   - log_softmax: a plain scalar libm version (std::exp / std::log);
//   - cross-entropy: the composed path over materialised (T, V) logits (gemm_f32 +
//     cross_entropy_logits_fwd/bwd + gemm_f32 / gemm_f32_tn), and the bare GEMMs alone
//     (the FLOP floor of the fused kernel: 4 products of 2·T·D·V FLOP).
// Run: build/bench/rows_bench --benchmark_min_time=1  (TITAN_NUM_THREADS sets threads).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/gemm.h"
#include "titan/kernels/cpu/loss.h"
#include "titan/kernels/cpu/norm.h"
#include "titan/kernels/cpu/softmax.h"

namespace tk = titan::kernels::cpu;

namespace {

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

void set_tokens(benchmark::State& st, int64_t T, double bytes_per_iter = 0, double flop_per_iter = 0) {
  st.counters["tokens/s"] = benchmark::Counter(static_cast<double>(T), benchmark::Counter::kIsIterationInvariantRate);
  if (bytes_per_iter > 0)
    st.counters["GB/s"] = benchmark::Counter(bytes_per_iter / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  if (flop_per_iter > 0)
    st.counters["GFLOP/s"] = benchmark::Counter(flop_per_iter / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// ---- RMSNorm (T, D) ----------------------------------------------------------------
void BM_rms_norm_fwd(benchmark::State& st) {
  const int64_t T = st.range(0), D = st.range(1);
  auto x = randn(T * D, 1), w = randn(D, 2);
  std::vector<float> y(T * D), r(T);
  for (auto _ : st) {
    tk::rms_norm_fwd(y.data(), r.data(), x.data(), w.data(), T, D, 1e-6f);
    benchmark::DoNotOptimize(y.data());
  }
  set_tokens(st, T, 2.0 * 4 * T * D);
}
void BM_rms_norm_bwd(benchmark::State& st) {
  const int64_t T = st.range(0), D = st.range(1);
  auto x = randn(T * D, 1), w = randn(D, 2), g = randn(T * D, 3);
  std::vector<float> y(T * D), r(T), dx(T * D), dw(D);
  tk::rms_norm_fwd(y.data(), r.data(), x.data(), w.data(), T, D, 1e-6f);
  for (auto _ : st) {
    tk::rms_norm_bwd(dx.data(), dw.data(), g.data(), x.data(), w.data(), r.data(), T, D, false);
    benchmark::DoNotOptimize(dx.data());
  }
  set_tokens(st, T, 3.0 * 4 * T * D);
}
void BM_peer_memcpy(benchmark::State& st) {  // read T·D floats, write T·D floats
  const int64_t T = st.range(0), D = st.range(1);
  auto x = randn(T * D, 1);
  std::vector<float> y(T * D);
  for (auto _ : st) {
    titan::parallel_for(titan::num_threads(), [&](int64_t b, int64_t e) {
      const int64_t n = T * D, p = titan::num_threads();
      for (int64_t k = b; k < e; ++k)
        std::memcpy(y.data() + n * k / p, x.data() + n * k / p, sizeof(float) * (n * (k + 1) / p - n * k / p));
    });
    benchmark::DoNotOptimize(y.data());
  }
  set_tokens(st, T, 2.0 * 4 * T * D);
}

// ---- log_softmax (T, V) -----------------------------------------------------------
void BM_log_softmax_fwd(benchmark::State& st) {
  const int64_t T = st.range(0), V = st.range(1);
  auto x = randn(T * V, 4, 3.0f);
  std::vector<float> y(T * V);
  for (auto _ : st) {
    tk::log_softmax_fwd(y.data(), nullptr, x.data(), T, V);
    benchmark::DoNotOptimize(y.data());
  }
  set_tokens(st, T, 2.0 * 4 * T * V);
}
void BM_peer_log_softmax_scalar_libm(benchmark::State& st) {
  const int64_t T = st.range(0), V = st.range(1);
  auto x = randn(T * V, 4, 3.0f);
  std::vector<float> y(T * V);
  for (auto _ : st) {
    titan::parallel_for(T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const float* xr = x.data() + t * V;
        float m = -INFINITY, s = 0.0f;
        for (int64_t j = 0; j < V; ++j) m = std::max(m, xr[j]);
        for (int64_t j = 0; j < V; ++j) s += std::exp(xr[j] - m);
        const float l = m + std::log(s);
        for (int64_t j = 0; j < V; ++j) y[t * V + j] = xr[j] - l;
      }
    });
    benchmark::DoNotOptimize(y.data());
  }
  set_tokens(st, T, 2.0 * 4 * T * V);
}

// ---- cross-entropy fwd + bwd (T, D) · (V, D)ᵀ -------------------------------------
struct Ce {
  int64_t T, D, V;
  std::vector<float> h, w, dl, loss, lse, dh, dw;
  std::vector<int64_t> y;
  Ce(int64_t T_, int64_t D_, int64_t V_)
      : T(T_), D(D_), V(V_), h(randn(T * D, 5)), w(randn(V * D, 6, 0.05f)),
        dl(T, 1.0f / static_cast<float>(T)), loss(T), lse(T), dh(T * D), dw(V * D), y(T) {
    for (int64_t t = 0; t < T; ++t) y[t] = (t * 7919) % V;
  }
  double flop() const { return 4.0 * 2.0 * T * D * V; }
};

void BM_cross_entropy_fused_fwd_bwd(benchmark::State& st) {
  Ce c(st.range(0), st.range(1), st.range(2));
  for (auto _ : st) {
    tk::cross_entropy_fwd(c.loss.data(), c.lse.data(), c.h.data(), c.w.data(), c.y.data(), c.T, c.D,
                          c.V, -100, 0.0f, 1.0f);
    tk::cross_entropy_bwd(c.dh.data(), c.dw.data(), c.dl.data(), c.h.data(), c.w.data(), c.y.data(),
                          c.lse.data(), c.T, c.D, c.V, -100, 0.0f, 1.0f, false);
    benchmark::DoNotOptimize(c.dw.data());
  }
  set_tokens(st, c.T, 0, c.flop());
}
void BM_cross_entropy_fused_fwd(benchmark::State& st) {
  Ce c(st.range(0), st.range(1), st.range(2));
  for (auto _ : st) {
    tk::cross_entropy_fwd(c.loss.data(), c.lse.data(), c.h.data(), c.w.data(), c.y.data(), c.T, c.D,
                          c.V, -100, 0.0f, 1.0f);
    benchmark::DoNotOptimize(c.loss.data());
  }
  set_tokens(st, c.T, 0, c.flop() / 4);
}
void BM_peer_cross_entropy_composed(benchmark::State& st) {  // materialised (T, V) logits
  Ce c(st.range(0), st.range(1), st.range(2));
  std::vector<float> logits(c.T * c.V), dlogits(c.T * c.V);
  for (auto _ : st) {
    tk::gemm_f32(c.T, c.V, c.D, c.h.data(), c.D, c.w.data(), c.D, true, logits.data(), c.V, false);
    tk::cross_entropy_logits_fwd(c.loss.data(), c.lse.data(), logits.data(), c.y.data(), c.T, c.V,
                                 -100, 0.0f, 1.0f);
    tk::cross_entropy_logits_bwd(dlogits.data(), c.dl.data(), logits.data(), c.y.data(),
                                 c.lse.data(), c.T, c.V, -100, 0.0f, 1.0f);
    tk::gemm_f32(c.T, c.D, c.V, dlogits.data(), c.V, c.w.data(), c.D, false, c.dh.data(), c.D, false);
    tk::gemm_f32_tn(c.V, c.D, c.T, dlogits.data(), c.V, c.h.data(), c.D, c.dw.data(), c.D, false);
    benchmark::DoNotOptimize(c.dw.data());
  }
  set_tokens(st, c.T, 0, c.flop() * 3 / 4);  // the composed path runs 3 GEMMs
}
void BM_peer_gemm_floor(benchmark::State& st) {  // the 4 GEMMs of the fused path, alone
  Ce c(st.range(0), st.range(1), st.range(2));
  std::vector<float> logits(c.T * c.V);
  for (auto _ : st) {
    for (int k = 0; k < 2; ++k)
      tk::gemm_f32(c.T, c.V, c.D, c.h.data(), c.D, c.w.data(), c.D, true, logits.data(), c.V, false);
    tk::gemm_f32(c.T, c.D, c.V, logits.data(), c.V, c.w.data(), c.D, false, c.dh.data(), c.D, false);
    tk::gemm_f32_tn(c.V, c.D, c.T, logits.data(), c.V, c.h.data(), c.D, c.dw.data(), c.D, false);
    benchmark::DoNotOptimize(c.dw.data());
  }
  set_tokens(st, c.T, 0, c.flop());
}

}  // namespace

// Times: wall clock with several threads; with TITAN_NUM_THREADS=1, the calling
// thread's CPU time (robust on a machine shared with other jobs), and the rates follow.
void reg(benchmark::internal::Benchmark* b) {
  if (titan::num_threads() > 1) b->UseRealTime();
}

BENCHMARK(BM_rms_norm_fwd)->Args({2048, 4096})->Args({2048, 512})->Apply(reg)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_rms_norm_bwd)->Args({2048, 4096})->Args({2048, 512})->Apply(reg)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_peer_memcpy)->Args({2048, 4096})->Args({2048, 512})->Apply(reg)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_log_softmax_fwd)->Args({256, 32000})->Apply(reg)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_peer_log_softmax_scalar_libm)->Args({256, 32000})->Apply(reg)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_cross_entropy_fused_fwd)->Args({2048, 512, 32000})->Apply(reg)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_cross_entropy_fused_fwd_bwd)->Args({2048, 512, 32000})->Apply(reg)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_peer_cross_entropy_composed)->Args({2048, 512, 32000})->Apply(reg)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_peer_gemm_floor)->Args({2048, 512, 32000})->Apply(reg)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
