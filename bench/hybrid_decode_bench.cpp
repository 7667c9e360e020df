// Decode of a hybrid linear-attention model against a pure-attention model of the same
// size (docs/benchmarks.md, "Hybrid decode"): random weights, batch 1, greedy, the
// engine's default config. Both models: dim 512, 8 layers, F 1536, vocab 32000, tied;
//   attention: every layer GQA, 8/4 heads of Dh 64 (qwen3_next without linear layers);
//   hybrid:    qwen3_next layout, layers 3 GDN : 1 gated attention (2 attention layers),
//              GDN 4 q/k heads and 8 value heads of 64 dims, conv 4.
// A context of C tokens is prefilled (chunked, 2048 per step), then decode steps are
// timed (each step one token at contexts C .. C + steps).
//
//   build/bench/hybrid_decode_bench [--benchmark_filter=...]
//
// Counters: tok/s (decode tokens per second of wall time), cache_MiB_per_seq (the KV
// blocks the sequence holds at context C + the recurrent-state row; the hybrid's state is
// fixed, its K/V is that of 2 layers), params_M. HYBRID_BENCH_16K=1 adds context 16384.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "titan/core/philox.h"
#include "titan/infer/engine.h"
#include "titan/infer/model_loader.h"
#include "titan/models/family.h"

namespace {

using namespace titan;
using namespace titan::infer;

models::TransformerConfig config(bool hybrid) {
  models::TransformerConfig c = models::flavor("qwen3_next", "debugmodel");
  c.vocab_size = 32000;
  c.hidden_size = 512;
  c.intermediate_size = 1536;
  c.num_hidden_layers = 8;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 4;
  c.head_dim = 64;
  c.max_position_embeddings = 32768;
  c.linear_num_key_heads = 4;
  c.linear_num_value_heads = 8;
  c.linear_key_head_dim = 64;
  c.linear_value_head_dim = 64;
  c.layer_types.clear();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    c.layer_types.push_back(hybrid && (l + 1) % 4 ? "linear_attention" : "full_attention");
  return c;
}

const models::Decoder& model(bool hybrid) {
  static std::unique_ptr<models::Decoder> m[2];
  auto& p = m[hybrid ? 1 : 0];
  if (!p) {
    p = std::make_unique<models::Decoder>(config(hybrid));
    p->init_weights(0);
    prepare_for_inference(*p);
  }
  return *p;
}

void BM_Decode(benchmark::State& state) {
  const int64_t ctx = state.range(0);
  const bool hybrid = state.range(1) != 0;
  const models::Decoder& m = model(hybrid);
  EngineConfig ec;
  ec.kv_cache_bytes = int64_t{1} << 30;
  ec.max_num_seqs = 4;
  ec.enable_prefix_caching = false;
  Engine e(m, nullptr, ec);
  std::vector<int32_t> prompt(static_cast<size_t>(ctx));
  for (int64_t i = 0; i < ctx; ++i) prompt[i] = 1 + static_cast<int32_t>(philox_draw(7, i)[0] % 31999);
  SamplingParams sp;
  sp.temperature = 0.0;
  sp.max_tokens = 100000;
  sp.ignore_eos = true;
  e.add_request(prompt, sp);
  while (e.stats().decode_tokens < 1) e.step();  // prefilled and decoding
  const EngineStats before = e.stats();
  for (auto _ : state) e.step();
  const double steps = static_cast<double>(state.iterations());
  state.counters["tok/s"] = benchmark::Counter(steps, benchmark::Counter::kIsRate);
  state.counters["fwd_ms"] = 1e3 * (e.stats().forward_s - before.forward_s) / steps;
  const int64_t B = ec.block_size;
  const double kv = static_cast<double>((ctx + B - 1) / B) * static_cast<double>(Engine::kv_bytes_per_block(m, B));
  const double st = static_cast<double>(Engine::state_bytes_per_slot(m));
  state.counters["cache_MiB_per_seq"] = (kv + st) / (1 << 20);
  state.counters["state_MiB_per_seq"] = st / (1 << 20);
  state.counters["params_M"] = static_cast<double>(m.num_parameters()) / 1e6;
}

void contexts(benchmark::internal::Benchmark* b) {
  std::vector<int64_t> ctxs{4096};
  if (const char* e = std::getenv("HYBRID_BENCH_16K"); e && std::string(e) == "1") ctxs.push_back(16384);
  for (int64_t c : ctxs)
    for (int64_t h : {0, 1}) b->Args({c, h});
}
BENCHMARK(BM_Decode)->Apply(contexts)->Iterations(64)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
