// Gated DeltaNet benchmark: the chunked gated delta rule (kernels/cpu/gated_delta.h),
// forward + backward tokens/s on one packed sequence, against full causal attention of
// the same width (flash-style kernels/cpu/attention.h, H = 8 heads of 128, no GQA) in
// the same run, and the decode step of the canonical chunked form against a plain
// recurrent step (the arithmetic titan does not use, timed as the peer).
// Results: docs/benchmarks.md, "Gated DeltaNet".
//
//   build/bench/gated_delta_bench [--benchmark_filter=...]
//
// Counters: tok/s = tokens / s (one thread: per CPU second of the working thread).
// GFLOP/s, GDN: forward 2·T·H·(3·K·V + C·(K + V)) (the two state reads, the rank-C state
// update per chunk, and on average C/2 pair terms of K + V for both the UT solve and the
// intra-chunk output, C = 64), backward counted as 2x the forward (it recomputes the
// forward rows and does about the same again); attention: forward 4·Dh·H·T(T+1)/2,
// backward 2.5x that.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/attention.h"
#include "titan/kernels/cpu/gated_delta.h"

namespace {
using namespace titan::kernels::cpu;

constexpr int kH = 8, kD = 128;

std::vector<float> random_vec(size_t n, uint32_t seed, float lo, float hi) {
  uint64_t s = 0x9E3779B97F4A7C15ull * (seed + 1);
  std::vector<float> v(n);
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = lo + (hi - lo) * static_cast<float>(s >> 40) / 16777216.0f;
  }
  return v;
}

// Unit-norm rows of length D.
std::vector<float> unit_rows(size_t rows, int D, uint32_t seed) {
  std::vector<float> v = random_vec(rows * D, seed, -1.0f, 1.0f);
  for (size_t r = 0; r < rows; ++r) {
    double n2 = 0;
    for (int d = 0; d < D; ++d) n2 += v[r * D + d] * v[r * D + d];
    for (int d = 0; d < D; ++d) v[r * D + d] = static_cast<float>(v[r * D + d] / std::sqrt(n2));
  }
  return v;
}

struct Gdn {
  int64_t T;
  std::vector<float> q, k, v, g, beta, o, states, dout, dq, dk, dv, dg, db;
  std::vector<int64_t> cu;
  explicit Gdn(int64_t T_) : T(T_) {
    q = unit_rows(T * kH, kD, 1);
    k = unit_rows(T * kH, kD, 2);
    v = random_vec(T * kH * kD, 3, -1.0f, 1.0f);
    g = random_vec(T * kH, 4, -1.0f, -0.01f);
    beta = random_vec(T * kH, 5, 0.0f, 1.0f);
    dout = random_vec(T * kH * kD, 6, -1.0f, 1.0f);
    o.resize(T * kH * kD);
    dq.resize(q.size()), dk.resize(k.size()), dv.resize(v.size()), dg.resize(g.size()),
        db.resize(beta.size());
    cu = {0, T};
    states.resize(gated_delta_num_chunks(cu.data(), 1) * kH * kD * kD);
  }
  void fwd() {
    gated_delta_fwd(o.data(), states.data(), nullptr, q.data(), k.data(), v.data(), g.data(),
                    beta.data(), cu.data(), nullptr, 1, kH, kD, kD, false, 1.0f / std::sqrt(128.0f));
  }
  void bwd() {
    gated_delta_bwd(dq.data(), dk.data(), dv.data(), dg.data(), db.data(), dout.data(),
                    states.data(), q.data(), k.data(), v.data(), g.data(), beta.data(), cu.data(),
                    1, kH, kD, kD, false, 1.0f / std::sqrt(128.0f));
  }
  double fwd_flops() const {
    return 2.0 * T * kH * (3.0 * kD * kD + kGatedDeltaChunk * (2.0 * kD));
  }
};

void BM_GdnFwdBwd(benchmark::State& st) {
  titan::set_num_threads(static_cast<int>(st.range(1)));
  Gdn p(st.range(0));
  for (auto _ : st) {
    p.fwd();
    p.bwd();
  }
  st.counters["tok/s"] = benchmark::Counter(p.T, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GFLOP/s"] =
      benchmark::Counter(1e-9 * 3.0 * p.fwd_flops(), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_GdnFwd(benchmark::State& st) {
  titan::set_num_threads(static_cast<int>(st.range(1)));
  Gdn p(st.range(0));
  for (auto _ : st) p.fwd();
  st.counters["tok/s"] = benchmark::Counter(p.T, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GFLOP/s"] =
      benchmark::Counter(1e-9 * p.fwd_flops(), benchmark::Counter::kIsIterationInvariantRate);
}

struct Attn {
  int T;
  std::vector<float> q, k, v, out, lse, dout, dq, dk, dv;
  std::vector<int32_t> cu;
  explicit Attn(int T_) : T(T_) {
    const size_t n = size_t{1} * T * kH * kD;
    q = random_vec(n, 1, -1.5f, 1.5f);
    k = random_vec(n, 2, -1.5f, 1.5f);
    v = random_vec(n, 3, -1.5f, 1.5f);
    dout = random_vec(n, 4, -1.5f, 1.5f);
    out.resize(n), lse.resize(size_t{1} * T * kH), dq.resize(n), dk.resize(n), dv.resize(n);
    cu = {0, T};
  }
  double fwd_flops() const { return 4.0 * kD * kH * (double(T) * (T + 1) / 2); }
};

void BM_AttnFwdBwd(benchmark::State& st) {
  titan::set_num_threads(static_cast<int>(st.range(1)));
  Attn p(static_cast<int>(st.range(0)));
  for (auto _ : st) {
    attention_varlen_fwd(p.out.data(), p.lse.data(), p.q.data(), p.k.data(), p.v.data(),
                         p.cu.data(), 1, p.T, kH, kH, kD, {});
    attention_varlen_bwd(p.dq.data(), p.dk.data(), p.dv.data(), nullptr, p.dout.data(),
                         p.out.data(), p.lse.data(), p.q.data(), p.k.data(), p.v.data(),
                         p.cu.data(), 1, p.T, kH, kH, kD);
  }
  st.counters["tok/s"] = benchmark::Counter(p.T, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GFLOP/s"] =
      benchmark::Counter(1e-9 * 3.5 * p.fwd_flops(), benchmark::Counter::kIsIterationInvariantRate);
}

void train_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"T", "threads"});
  for (int T : {512, 2048, 8192}) b->Args({T, 1});
  b->Unit(benchmark::kMillisecond)->Iterations(1)->Repetitions(2)
      ->ReportAggregatesOnly(false);
}
BENCHMARK(BM_GdnFwd)->Apply(train_args);
BENCHMARK(BM_GdnFwdBwd)->Apply(train_args);
BENCHMARK(BM_AttnFwdBwd)->Apply(train_args);

// ---- decode: one token of H = 8 heads (K = V = 128) from a state slot whose chunk holds
// `pos` earlier tokens (the canonical form's cost grows with the position in the chunk),
// vs the recurrent step (decay, read, rank-1 update, read: 4 passes over S).
void BM_GdnDecodeStep(benchmark::State& st) {
  titan::set_num_threads(1);
  const int64_t pos = st.range(0);
  Gdn p(pos + 1);
  std::vector<float> slot(gated_delta_state_floats(kH, kD, kD, false), 0.0f), o(kH * kD);
  const int64_t cu0[2] = {0, pos};
  const int64_t zero[1] = {0};
  if (pos > 0)
    gated_delta_fwd(p.o.data(), nullptr, slot.data(), p.q.data(), p.k.data(), p.v.data(),
                    p.g.data(), p.beta.data(), cu0, zero, 1, kH, kD, kD, false, 0.088f);
  const std::vector<float> saved = slot;
  const int64_t cu1[2] = {0, 1};
  const int64_t at[1] = {pos};
  for (auto _ : st) {
    st.PauseTiming();
    std::memcpy(slot.data(), saved.data(), saved.size() * 4);
    st.ResumeTiming();
    gated_delta_fwd(o.data(), nullptr, slot.data(), p.q.data() + pos * kH * kD,
                    p.k.data() + pos * kH * kD, p.v.data() + pos * kH * kD, p.g.data() + pos * kH,
                    p.beta.data() + pos * kH, cu1, at, 1, kH, kD, kD, false, 0.088f);
  }
  st.counters["s/token"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate |
                                                        benchmark::Counter::kInvert);
}
BENCHMARK(BM_GdnDecodeStep)->ArgName("pos_in_chunk")->Arg(0)->Arg(31)->Arg(63)
    ->Unit(benchmark::kMicrosecond);

// The recurrent step for one head, AVX2 (S rows of V = 128 lanes, 16 ymm accumulators):
// pass 1 decays S and reads kv = Sᵀk, pass 2 adds k (β(v − kv))ᵀ and reads o = Sᵀq.
__attribute__((noinline, target("avx2,fma"))) void recurrent_step(
    float* S, float* o, const float* q, const float* k, const float* v, float alpha, float beta) {
  __m256 acc[kD / 8];
  for (auto& a : acc) a = _mm256_setzero_ps();
  const __m256 al = _mm256_set1_ps(alpha);
  for (int d = 0; d < kD; ++d) {
    const __m256 kd = _mm256_set1_ps(k[d]);
    for (int j = 0; j < kD / 8; ++j) {
      const __m256 s = _mm256_mul_ps(al, _mm256_loadu_ps(S + d * kD + 8 * j));
      _mm256_storeu_ps(S + d * kD + 8 * j, s);
      acc[j] = _mm256_fmadd_ps(kd, s, acc[j]);
    }
  }
  const __m256 bt = _mm256_set1_ps(beta);
  for (int j = 0; j < kD / 8; ++j)
    acc[j] = _mm256_mul_ps(bt, _mm256_sub_ps(_mm256_loadu_ps(v + 8 * j), acc[j]));
  __m256 out[kD / 8];
  for (auto& a : out) a = _mm256_setzero_ps();
  for (int d = 0; d < kD; ++d) {
    const __m256 kd = _mm256_set1_ps(k[d]), qd = _mm256_set1_ps(q[d]);
    for (int j = 0; j < kD / 8; ++j) {
      const __m256 s = _mm256_fmadd_ps(kd, acc[j], _mm256_loadu_ps(S + d * kD + 8 * j));
      _mm256_storeu_ps(S + d * kD + 8 * j, s);
      out[j] = _mm256_fmadd_ps(qd, s, out[j]);
    }
  }
  for (int j = 0; j < kD / 8; ++j) _mm256_storeu_ps(o + 8 * j, out[j]);
}

void BM_RecurrentDecodeStep(benchmark::State& st) {
  std::vector<float> S = random_vec(kH * kD * kD, 7, -0.1f, 0.1f), o(kH * kD);
  const std::vector<float> q = unit_rows(kH, kD, 8), k = unit_rows(kH, kD, 9),
                           v = random_vec(kH * kD, 10, -1.0f, 1.0f);
  for (auto _ : st) {
    for (int h = 0; h < kH; ++h)
      recurrent_step(S.data() + h * kD * kD, o.data() + h * kD, q.data() + h * kD,
                     k.data() + h * kD, v.data() + h * kD, 0.97f, 0.5f);
    benchmark::DoNotOptimize(o.data());
  }
  st.counters["s/token"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate |
                                                        benchmark::Counter::kInvert);
}
BENCHMARK(BM_RecurrentDecodeStep)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
