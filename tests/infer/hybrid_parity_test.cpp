// Generator/trainer parity for hybrid linear-attention models (the Qwen3-Next layout: Gated
// DeltaNet layers, and the Kimi Linear layout: Kimi Delta Attention layers, each with
// per-sequence state slots beside full-attention layers with paged K/V), bitwise (memcmp):
//   - prefill == token-by-token decode: the generator decodes every completion token from
//     the state slots, the trainer recomputes prompt + completion in one packed forward
//     (autograd on); the logprobs agree bit for bit;
//   - chunked prefill == whole prefill (token budgets 5, 16, 37, 48);
//   - prefix-cache hit == recompute (state snapshots at KV block boundaries; the results
//     with hits equal those without prefix caching, and the hits are counted);
//   - n > 1 samples start from copies of the prompt's state (one request with n = 3);
//   - preemption + recompute keep the bits (a pool so small that sequences are preempted);
//   - batch invariance: prompts of 1, 7 and 257 tokens alone and together, 1 and 2 threads.
// Changing the generator's KV block size (one kernel parameter, generator only) makes the
// logprobs differ from the trainer's, which shows the comparison can fail.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "parity_util.h"
#include "titan/autograd/node.h"
#include "titan/core/thread_pool.h"
#include "titan/ops/loss.h"

using namespace titan;
using namespace titan::infer;
using namespace titan::infer::testing;

namespace {

// Small hybrids: layers linear, linear, linear, attention. "gdn": the qwen3_next layout
// (Gated DeltaNet, 2 q/k heads / 4 value heads, gated attention); "kda": the kimi_linear
// layout (Kimi Delta Attention, 2 heads, plain GQA).
models::TransformerConfig hybrid_config(const std::string& kind) {
  models::TransformerConfig c = tiny_config(kind == "kda" ? "kimi_linear" : "qwen3_next");
  c.num_hidden_layers = 4;
  c.max_position_embeddings = 512;
  c.tie_word_embeddings = true;
  c.linear_num_key_heads = 2;
  c.linear_num_value_heads = kind == "kda" ? 2 : 4;
  c.linear_key_head_dim = 16;
  c.linear_value_head_dim = 16;
  c.linear_conv_kernel_dim = 4;
  c.linear_attn_type = kind;
  if (kind == "gdn") {
    c.qk_norm = true;
    c.attn_output_gate = true;
    c.norm_unit_offset = true;
    c.partial_rotary_factor = 0.25;
  }
  c.layer_types = {"linear_attention", "linear_attention", "linear_attention", "full_attention"};
  return c;
}

std::unique_ptr<models::Decoder> hybrid_model(const std::string& kind) {
  auto m = std::make_unique<models::Decoder>(hybrid_config(kind));
  m->init_weights(5);
  return m;
}

class HybridParity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model = hybrid_model(GetParam());
    c = make_case();
  }
  std::unique_ptr<models::Decoder> model;
  Case c;
};

TEST_P(HybridParity, CacheDeclaresStateSlots) {
  // 3 linear layers, each: conv tail (W − 1 = 3, conv channels) + the delta-rule slot
  // H·(K·V + 64·(K + Gd + V)), Gd = 1 (GDN) or K (KDA).
  const bool kda = GetParam() == "kda";
  const int64_t H = kda ? 2 : 4, conv = kda ? 3 * 2 * 16 : 2 * 2 * 16 + 4 * 16, Gd = kda ? 16 : 1;
  const int64_t per_layer = 3 * conv + H * (16 * 16 + 64 * (16 + Gd + 16));
  EXPECT_EQ(Engine::state_bytes_per_slot(*model), 3 * per_layer * 4);
  // Only the attention layer is paged: K and V of 2 heads · 16 dims · 32 tokens.
  EXPECT_EQ(Engine::kv_bytes_per_block(*model, 32), 2 * 2 * 16 * 32 * 4);
  Engine e(*model, nullptr, base_config());
  EXPECT_EQ(e.state_pool().num_seq_slots(), 16);
  EXPECT_EQ(e.state_pool().num_snapshots(), 16);
  EXPECT_LE(e.kv_cache_bytes(), base_config().kv_cache_bytes);
}

TEST_P(HybridParity, TrainerLogprobsEqualGeneratorBitwise) {
  const Result gen = run_all_at_once(*model, c, base_config());
  ASSERT_EQ(gen.tokens.size(), 9u);
  EXPECT_NE(gen.tokens[3], gen.tokens[4]);  // the n = 3 samples are different streams
  const auto tr = trainer_logprobs(*model, c, gen);
  const double d = max_abs_diff(gen, tr);
  std::printf("%s hybrid: generator (decode from state slots) vs trainer logprobs: max |delta| = %.1f over %zu "
              "samples\n", GetParam().c_str(), d, tr.size());
  EXPECT_EQ(d, 0.0);
  for (size_t i = 0; i < tr.size(); ++i) EXPECT_TRUE(same_bits(gen.logprobs[i], tr[i])) << "sample " << i;
}

TEST_P(HybridParity, EngineModesAgreeBitwise) {
  const Result all = run_all_at_once(*model, c, base_config());
  {
    Engine e(*model, nullptr, base_config());
    std::vector<RequestOutput> outs;
    for (size_t i = 0; i < c.prompts.size(); ++i) outs.push_back(std::move(e.generate({c.prompts[i]}, {c.params[i]})[0]));
    expect_same(all, flatten(outs), "one at a time");
  }
  for (int64_t budget : {5, 16, 37, 48}) {
    EngineConfig ec = base_config();
    ec.max_num_batched_tokens = budget;
    expect_same(all, run_all_at_once(*model, c, ec), "chunked prefill, budget " + std::to_string(budget));
  }
  {
    EngineConfig ec = base_config();
    ec.num_kv_blocks = 9;
    ec.max_num_batched_tokens = 64;
    EngineStats st;
    expect_same(all, run_all_at_once(*model, c, ec, &st), "preemption by recomputation");
    EXPECT_GT(st.preemptions, 0);
  }
  {
    EngineConfig ec = base_config();
    ec.enable_prefix_caching = false;
    expect_same(all, run_all_at_once(*model, c, ec), "no prefix caching");
  }
  {
    const int nt = num_threads();
    set_num_threads(1);
    Result one = run_all_at_once(*model, c, base_config());
    set_num_threads(nt);
    expect_same(all, one, "1 thread");
  }
}

TEST_P(HybridParity, PrefixCacheResumesFromSnapshots) {
  // One request at a time. Request 3 (70 tokens, one chunk) leaves the state snapshot of
  // its first 64 tokens; request 4 (its first 64 tokens + 9) resumes there; request 5
  // shares only 40 tokens, and no snapshot sits at 32, so it recomputes; the samples 1
  // and 2 of request 3 resume from the snapshot at 64 (copies of the prompt's state).
  Engine e(*model, nullptr, base_config());
  std::vector<RequestOutput> outs;
  std::vector<int64_t> cached;
  for (size_t i = 0; i < c.prompts.size(); ++i) {
    outs.push_back(std::move(e.generate({c.prompts[i]}, {c.params[i]})[0]));
    cached.push_back(outs.back().metrics.num_cached_tokens);
  }
  EXPECT_EQ(cached[3], 0);
  EXPECT_EQ(cached[4], 64);
  EXPECT_EQ(cached[5], 0);
  EXPECT_EQ(e.stats().cached_prompt_tokens, 64 + 2 * 64);
  EngineConfig ec = base_config();
  ec.enable_prefix_caching = false;
  Engine e2(*model, nullptr, ec);
  std::vector<RequestOutput> ref;
  for (size_t i = 0; i < c.prompts.size(); ++i) ref.push_back(std::move(e2.generate({c.prompts[i]}, {c.params[i]})[0]));
  expect_same(flatten(ref), flatten(outs), "prefix-cache hits vs recompute");
}

TEST_P(HybridParity, BatchInvariance1_7_257Tokens) {
  Case b;
  b.prompts = {random_tokens(1, 21), random_tokens(7, 22), random_tokens(257, 23)};
  b.params = {sp(0.0, {}, 1, 6), sp(0.0, {}, 1, 6), sp(0.0, {}, 1, 6)};
  const int nt = num_threads();
  std::vector<Result> together;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    together.push_back(run_all_at_once(*model, b, base_config()));
    for (size_t i = 0; i < b.prompts.size(); ++i) {
      Case one;
      one.prompts = {b.prompts[i]};
      one.params = {b.params[i]};
      const Result alone = run_all_at_once(*model, one, base_config());
      EXPECT_EQ(alone.tokens[0], together.back().tokens[i]) << threads << " threads, prompt " << i;
      EXPECT_TRUE(same_bits(alone.logprobs[0], together.back().logprobs[i])) << threads << " threads, prompt " << i;
    }
  }
  set_num_threads(nt);
  expect_same(together[0], together[1], "1 vs 2 threads");
  EXPECT_EQ(max_abs_diff(together[0], trainer_logprobs(*model, b, together[0])), 0.0);
}

TEST_P(HybridParity, GeneratorOnlyChangeBreaksParity) {
  EngineConfig ec = base_config();
  ec.block_size = 2 * kernels::cpu::kKvBlockSize;  // the attention layer's key blocks
  const Result gen64 = run_all_at_once(*model, c, ec);
  const double d = max_abs_diff(gen64, trainer_logprobs(*model, c, gen64));
  std::printf("%s hybrid: generator KV block %d vs trainer %d: max |delta| = %.3g\n", GetParam().c_str(),
              2 * kernels::cpu::kKvBlockSize, kernels::cpu::kKvBlockSize, d);
  EXPECT_GT(d, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Mixers, HybridParity, ::testing::Values("gdn", "kda"));

}  // namespace
