// Generator benchmark: the paged-KV-cache engine (titan/infer) on the llama3 `small`
// flavor (dim 512, 8 layers, 8/4 heads, Dh 64, F 1536, vocab 32000, tied; 41.0 M
// params, 164 MB fp32) with random weights, 2 threads. Results: docs/benchmarks.md,
// "Generator".
//
//   build-*/bench/engine_bench [--benchmark_filter=...]
//   ENGINE_BENCH_MODEL=llama3:100m ENGINE_BENCH_KV_MIB=512 build-*/bench/engine_bench ...
//
// ENGINE_BENCH_MODEL = family:flavor (default llama3:small; e.g. llama3:100m,
// qwen3:qwen3_0.6b), random weights. ENGINE_BENCH_KV_MIB = KV pool in MiB (default 256;
// qwen3_0.6b needs ~1024 for B = 8 at these contexts without preemption).
// ENGINE_BENCH_REPACK=0 keeps the weights in the trainer's (out, in) layout
// (default 1: infer::prepare_for_inference, as `titan generate` does).
// ENGINE_BENCH_DTYPE=bf16 runs the model in bf16 compute with bf16 weight panels
// (`titan generate --dtype bf16`; the LM head too, fp32 logits); weight_GB/s then counts
// the bytes actually streamed per token.
//
// Benchmarks (tok/s counters are tokens per second of wall time):
//   Decode/B/0      one engine step = one decode token for each of B running
//                   sequences (context ~100-150 tokens; temperature 1, no top-p/top-k),
//                   the engine's default config (sampled logprobs from the sampling
//                   logits). weight_GB/s = bytes of all weights streamed per step / step time.
//   Decode/B/1      the same with EngineConfig.logprobs_from_hidden = true (Decoder::logprobs
//                   on the hidden rows: the LM head is read once more per step).
//   Prefill512      one 512-token prompt (prefix caching off), max_tokens 1.
//   SampleRow/k     one sample_token call on a flat 32000-token row: temperature only,
//                   top-p 0.95, top-k 50 (1 thread).
//   Concurrent64    64 requests (prompts 32-160 tokens, 32-64 new tokens each) through
//                   one engine (continuous batching) vs one request at a time.
// Every benchmark reports the process's peak RSS next to weights + KV pool bytes.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "titan/core/philox.h"
#include "titan/core/thread_pool.h"
#include "titan/infer/engine.h"
#include "titan/infer/model_loader.h"
#include "titan/infer/sampler.h"
#include "titan/models/family.h"

namespace {

using namespace titan;
using namespace titan::infer;

const int64_t kKvPoolBytes = [] {
  const char* e = std::getenv("ENGINE_BENCH_KV_MIB");
  return (e ? std::stoll(e) : int64_t{256}) << 20;
}();

std::string model_name() {
  const char* e = std::getenv("ENGINE_BENCH_MODEL");
  return e ? e : "llama3:small";
}

const models::Decoder& bench_model() {
  static std::unique_ptr<models::Decoder> m = [] {
    const std::string name = model_name();
    const size_t colon = name.find(':');
    if (colon == std::string::npos)
      throw std::runtime_error("ENGINE_BENCH_MODEL: expected family:flavor, got '" + name + "'");
    auto d = std::make_unique<models::Decoder>(models::flavor(name.substr(0, colon), name.substr(colon + 1)));
    d->init_weights(0);
    const char* dtype = std::getenv("ENGINE_BENCH_DTYPE");
    if (dtype && std::string(dtype) == "bf16") d->set_compute_bf16(true);
    const char* repack = std::getenv("ENGINE_BENCH_REPACK");
    if (!repack || std::string(repack) != "0") prepare_for_inference(*d);
    return d;
  }();
  return *m;
}

// Bytes stored: the parameters, and a tied bf16 head's panels, which sit beside the
// fp32 embedding (Decoder::repack_for_decode).
double weight_bytes() {
  const models::Decoder& m = bench_model();
  double b = m.config().tie_word_embeddings && m.lm_head_repacked() && m.lm_head_bf16()
                 ? static_cast<double>(m.lm_head_bytes())
                 : 0.0;
  for (const auto& [n, p] : m.named_parameters()) b += static_cast<double>(p.nbytes());
  return b;
}

// Bytes streamed per decode step: every parameter but the embedding (a step reads B of
// its rows) and the LM head, plus the head in its layout.
double streamed_bytes() {
  double b = static_cast<double>(bench_model().lm_head_bytes());
  for (const auto& [n, p] : bench_model().named_parameters())
    if (n != "tok_embeddings.weight" && n != "output.weight") b += static_cast<double>(p.nbytes());
  return b;
}

double peak_rss_mib() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

std::vector<int32_t> prompt(int64_t n, uint64_t seed) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = 1 + static_cast<int32_t>(philox_draw(seed, i)[0] % 31999);
  return t;
}

EngineConfig engine_config(bool logprobs_from_hidden = false) {
  EngineConfig ec;
  ec.kv_cache_bytes = kKvPoolBytes;
  ec.max_num_seqs = 64;
  ec.max_num_batched_tokens = 2048;
  ec.enable_prefix_caching = false;
  ec.logprobs_from_hidden = logprobs_from_hidden;
  return ec;
}

// RL-style sampling (temperature 1, no top-p/top-k: on-policy samples). On these
// random-weight (flat) rows a top-p filter would radix-sort all 32000 tokens per row.
SamplingParams sampling(int64_t max_tokens, uint64_t seed) {
  SamplingParams p;
  p.temperature = 1.0;
  p.max_tokens = max_tokens;
  p.seed = seed;
  return p;
}

void memory_counters(benchmark::State& state, const Engine& e) {
  state.counters["peak_rss_MiB"] = peak_rss_mib();
  state.counters["weights_MiB"] = weight_bytes() / (1 << 20);
  state.counters["kv_pool_MiB"] = static_cast<double>(e.kv_cache_bytes()) / (1 << 20);
}

void BM_Decode(benchmark::State& state) {
  const int64_t B = state.range(0);
  const bool from_hidden = state.range(1) != 0;
  Engine e(bench_model(), nullptr, engine_config(from_hidden));
  for (int64_t i = 0; i < B; ++i) e.add_request(prompt(96, i), sampling(100000, i));
  while (e.stats().decode_tokens < B) e.step();  // every sequence prefilled and decoding
  const EngineStats before = e.stats();
  for (auto _ : state) e.step();
  const double steps = static_cast<double>(state.iterations());
  const EngineStats& after = e.stats();
  state.counters["fwd_ms"] = 1e3 * (after.forward_s - before.forward_s) / steps;
  state.counters["logits_ms"] = 1e3 * (after.logits_s - before.logits_s) / steps;
  state.counters["sample_lp_ms"] = 1e3 * (after.sample_s - before.sample_s) / steps;
  state.counters["tok/s"] = benchmark::Counter(steps * B, benchmark::Counter::kIsRate);
  const double lm_head = static_cast<double>(bench_model().lm_head_bytes());
  state.counters["weight_GB/s"] =
      benchmark::Counter(steps * (streamed_bytes() + (from_hidden ? lm_head : 0)) / 1e9, benchmark::Counter::kIsRate);
  memory_counters(state, e);
}
BENCHMARK(BM_Decode)->Args({1, 0})->Args({8, 0})->Args({64, 0})->Args({1, 1})->Args({64, 1})
    ->Iterations(48)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Prefill512(benchmark::State& state) {
  Engine e(bench_model(), nullptr, engine_config());
  SamplingParams p = sampling(1, 1);
  uint64_t i = 0;
  for (auto _ : state) e.generate({prompt(512, 1000 + i++)}, p);
  state.counters["tok/s"] = benchmark::Counter(512.0 * state.iterations(), benchmark::Counter::kIsRate);
  memory_counters(state, e);
}
BENCHMARK(BM_Prefill512)->Iterations(8)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Concurrent64(benchmark::State& state) {
  const bool batched = state.range(0) != 0;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;
  int64_t gen = 0;
  for (int i = 0; i < 64; ++i) {
    prompts.push_back(prompt(32 + (i * 37) % 129, 5000 + i));
    params.push_back(sampling(32 + (i * 13) % 33, i));
    gen += params.back().max_tokens;
  }
  double steps = 0;
  for (auto _ : state) {
    Engine e(bench_model(), nullptr, engine_config());
    if (batched) {
      e.generate(prompts, params);
    } else {
      for (size_t i = 0; i < prompts.size(); ++i) e.generate({prompts[i]}, {params[i]});
    }
    steps = static_cast<double>(e.stats().steps);
    memory_counters(state, e);
  }
  state.counters["gen_tok/s"] = benchmark::Counter(static_cast<double>(gen) * state.iterations(),
                                                   benchmark::Counter::kIsRate);
  state.counters["steps"] = steps;
}
BENCHMARK(BM_Concurrent64)->Arg(1)->Arg(0)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

// One sampler call on a flat 32000-token row (logits ~ N(0, 0.5²), like the random-
// weight model's): 0 = temperature only, 1 = top-p 0.95 (radix-sorts the row),
// 2 = top-k 50. One thread.
void BM_SampleRow(benchmark::State& state) {
  const int64_t V = 32000;
  std::vector<float> x(V);
  for (int64_t j = 0; j < V; ++j) {
    const auto r = philox_draw(1, static_cast<uint64_t>(j));
    x[j] = box_muller(r[0], r[1]) * 0.5f;
  }
  SamplingParams p;
  p.temperature = 0.8;
  if (state.range(0) == 1) p.top_p = 0.95;
  if (state.range(0) == 2) p.top_k = 50;
  SamplerScratch s;
  const int nt = num_threads();
  set_num_threads(1);
  int64_t pos = 0;
  for (auto _ : state) benchmark::DoNotOptimize(sample_token(x.data(), V, p, 1, 0, pos++, s));
  set_num_threads(nt);
}
BENCHMARK(BM_SampleRow)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  titan::set_num_threads(2);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::printf("model: %s, %lld params (%.1f MB of stored weights, %.1f MB streamed per decode step), KV pool "
              "%lld MiB, threads %d\n",
              model_name().c_str(), static_cast<long long>(bench_model().num_parameters()), weight_bytes() / 1e6,
              streamed_bytes() / 1e6,
              static_cast<long long>(kKvPoolBytes >> 20), titan::num_threads());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  // Issue 4's memory bound: the process's peak RSS (weights, one engine's KV pool at a
  // time — the engines run one after another — activations, the binary and its
  // libraries) <= weights + the configured KV pool + 10 %.
  const double bound = 1.1 * (weight_bytes() + static_cast<double>(kKvPoolBytes)) / (1 << 20);
  std::printf("peak RSS %.1f MiB vs weights + KV pool + 10%% = %.1f MiB: %s\n", peak_rss_mib(), bound,
              peak_rss_mib() <= bound ? "within" : "ABOVE");
  return 0;
}
