// MLA decode with the latent cache vs GQA of the same model width, at context 4096.
//
//   build/bench/mla_bench [--benchmark_filter=...]
//
//   Decode/0 mha  one decode token at position 4095 of a 2-layer llama3-style model
//                 (D 1024, 8 query heads of 128, 8 KV heads), K/V read from the paged cache
//   Decode/1 gqa  the same with 2 KV heads
//   Decode/2 mla  the same for a 2-layer MLA model of the same width (D 1024, 8 heads,
//                 nope 128 + rope 64, v 128, latent 512, q_proj), latent + RoPE key cache
//   ExpandLatent  kv_b_proj over the 4096 cached latents of one layer: the part of an MLA
//                 decode step that the non-absorbed form (trainer == generator) adds
// Counters: tok_s (decode tokens/s), kv_bytes_per_token (all layers, f32).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <memory>

#include "titan/autograd/node.h"
#include "titan/models/common/decoder.h"
#include "titan/models/family.h"

namespace {

using namespace titan;
using namespace titan::models;

constexpr int kCtx = 4096, kB = 32;

TransformerConfig gqa_config(int64_t kv_heads) {
  TransformerConfig c;
  c.family = "llama3";
  c.vocab_size = 1024;
  c.hidden_size = 1024;
  c.intermediate_size = 2816;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 8;
  c.num_key_value_heads = kv_heads;
  c.head_dim = 128;
  c.max_position_embeddings = kCtx;
  return c;
}

TransformerConfig mla_config() {
  TransformerConfig c = flavor("deepseek_v3", "debugmodel_dense");
  c.vocab_size = 1024;
  c.hidden_size = 1024;
  c.intermediate_size = 2816;
  c.num_hidden_layers = 2;
  c.first_k_dense_replace = 2;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 8;
  c.q_lora_rank = 0;
  c.kv_lora_rank = 512;
  c.qk_nope_head_dim = 128;
  c.qk_rope_head_dim = 64;
  c.head_dim = 64;
  c.v_head_dim = 128;
  c.max_position_embeddings = kCtx;
  return c;
}

struct Setup {
  std::unique_ptr<Decoder> model;
  ModelCache kv;
  std::vector<int32_t> table;
  int64_t kv_bytes_per_token = 0;
};

// Builds the model, fills the cache with a 4095-token prefill (in chunks of 512).
Setup& setup(int kind) {  // 0 mha, 1 gqa, 2 mla
  static std::unique_ptr<Setup> s[3];
  auto& slot = s[kind];
  const bool mla = kind == 2;
  if (slot) return *slot;
  slot = std::make_unique<Setup>();
  Setup& st = *slot;
  st.model = std::make_unique<Decoder>(mla ? mla_config() : gqa_config(kind == 0 ? 8 : 2));
  st.model->init_weights(0);
  st.model->repack_for_decode();
  const auto spec = st.model->cache_spec(kB);
  st.kv_bytes_per_token = cache_bytes_per_block(spec) / kB;
  const int64_t nb = kCtx / kB;
  st.kv = allocate_cache(spec, nb, kB);
  for (int64_t b = 0; b < nb; ++b) st.table.push_back(static_cast<int32_t>(b));
  autograd::NoGradGuard ng;
  for (int at = 0; at < kCtx - 1; at += 512) {
    const int n = std::min(512, kCtx - 1 - at);
    ForwardBatch fb;
    std::vector<int32_t> tk, ps, sq;
    std::vector<int64_t> sl;
    for (int i = 0; i < n; ++i) {
      tk.push_back((at + i) * 7 % 1024);
      ps.push_back(at + i);
      sq.push_back(0);
      sl.push_back(at + i);
    }
    fb.tokens = Tensor::from_vector(tk, {n});
    fb.positions = Tensor::from_vector(ps, {n});
    fb.seq_ids = Tensor::from_vector(sq, {n});
    fb.slot_mapping = Tensor::from_vector(sl, {n});
    fb.block_tables = Tensor::from_vector(st.table, {1, nb});
    fb.kv = &st.kv;
    st.model->forward(fb);
  }
  return st;
}

void Decode(benchmark::State& state) {
  const int kind = static_cast<int>(state.range(0));
  Setup& st = setup(kind);
  autograd::NoGradGuard ng;
  ForwardBatch fb;
  fb.tokens = Tensor::from_vector(std::vector<int32_t>{5}, {1});
  fb.positions = Tensor::from_vector(std::vector<int32_t>{kCtx - 1}, {1});
  fb.seq_ids = Tensor::from_vector(std::vector<int32_t>{0}, {1});
  fb.slot_mapping = Tensor::from_vector(std::vector<int64_t>{kCtx - 1}, {1});
  fb.block_tables = Tensor::from_vector(st.table, {1, static_cast<int64_t>(st.table.size())});
  fb.kv = &st.kv;
  for (auto _ : state) {
    Tensor h = st.model->forward(fb);
    benchmark::DoNotOptimize(st.model->logits(h).data<float>());
  }
  state.SetLabel(kind == 0 ? "mha" : kind == 1 ? "gqa" : "mla");
  state.counters["tok_s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["kv_bytes_per_token"] = static_cast<double>(st.kv_bytes_per_token);
}
BENCHMARK(Decode)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

void ExpandLatent(benchmark::State& state) {
  Setup& st = setup(2);
  autograd::NoGradGuard ng;
  const Tensor c = Tensor::randn({kCtx, 512}, 1);
  for (auto _ : state) benchmark::DoNotOptimize(st.model->layers[0]->mla->kv_b_proj->forward(c).data<float>());
  state.counters["per_s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(ExpandLatent)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
