// Generator/trainer parity, bitwise (DESIGN.md §1.2, notes/batch-invariance.md
// "How to test it"). The same prompts (mixed lengths, some longer than one KV block,
// some sharing prefixes, one with n = 3 samples) go through the engine
//   (a) one request at a time, (b) all at once, (c) with staggered arrivals,
//   (d) under several chunked-prefill token budgets, (e) with a pool so small that
//   sequences are preempted and recomputed, plus 1 thread, no prefix caching and
//   logprobs from the sampling logits instead of the hidden rows,
// and must give identical tokens and logprob bits in every mode. Then the trainer's
// forward (make_packed_batch over prompt + completion in a different packing order,
// autograd on, titan::logprobs on the hidden rows) must give the generator's logprobs
// bit for bit (max |Δ| printed, exactly 0). Flipping one kernel parameter on one side
// (the generator's KV block size, or the trainer's attention block size) must make
// |Δ| > 0, which shows the comparison can fail. Component overrides applied to the
// model (models/common/overrides.h) run on both sides: the generator keeps the trainer's
// bits with them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "infer_test_util.h"
#include "titan/autograd/node.h"
#include "titan/core/error.h"
#include "titan/core/thread_pool.h"
#include "titan/models/common/overrides.h"
#include "titan/models/family.h"
#include "titan/ops/loss.h"

using namespace titan;
using namespace titan::infer;
using namespace titan::infer::testing;

namespace {

struct Case {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;
};

Case make_case() {
  Case c;
  const std::vector<int32_t> base = random_tokens(80, 11);
  auto cat = [](std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  c.prompts = {
      random_tokens(5, 1),                                                  // short
      random_tokens(31, 2),                                                 // B - 1
      random_tokens(33, 3),                                                 // B + 1
      std::vector<int32_t>(base.begin(), base.begin() + 70),                // 3 blocks
      cat(std::vector<int32_t>(base.begin(), base.begin() + 64), random_tokens(9, 4)),   // shares 2 blocks
      cat(std::vector<int32_t>(base.begin(), base.begin() + 40), random_tokens(30, 5)),  // shares 1 block
      random_tokens(100, 6),                                                // long
  };
  auto sp = [](double t, double top_p, int top_k, double min_p, std::optional<uint64_t> seed, int n = 1) {
    SamplingParams p;
    p.temperature = t;
    p.top_p = top_p;
    p.top_k = top_k;
    p.min_p = min_p;
    p.seed = seed;
    p.n = n;
    p.max_tokens = 24;
    return p;
  };
  c.params = {sp(0.0, 1.0, 0, 0.0, {}),   sp(0.8, 0.9, 0, 0.0, 7),  sp(1.0, 1.0, 20, 0.0, 8),
              sp(0.7, 1.0, 0, 0.05, 9, 3), sp(1.2, 1.0, 0, 0.0, {}), sp(0.0, 1.0, 0, 0.0, 5),
              sp(0.9, 0.8, 50, 0.0, 10)};
  c.params[6].max_tokens = 30;
  return c;
}

EngineConfig base_config() {
  EngineConfig ec;
  ec.kv_cache_bytes = 8 << 20;
  ec.seed = 1234;
  return ec;
}

Result run_all_at_once(const models::Decoder& m, const Case& c, EngineConfig ec, EngineStats* stats = nullptr) {
  Engine e(m, nullptr, ec);
  Result r = flatten(e.generate(c.prompts, c.params));
  if (stats) *stats = e.stats();
  EXPECT_EQ(e.block_pool().num_free(), e.block_pool().num_blocks());
  return r;
}

Result run_one_at_a_time(const models::Decoder& m, const Case& c) {
  Engine e(m, nullptr, base_config());
  std::vector<RequestOutput> outs;
  for (size_t i = 0; i < c.prompts.size(); ++i) {
    auto o = e.generate({c.prompts[i]}, {c.params[i]});
    outs.push_back(std::move(o[0]));
  }
  return flatten(outs);
}

Result run_staggered(const models::Decoder& m, const Case& c) {
  EngineConfig ec = base_config();
  ec.max_num_batched_tokens = 48;
  Engine e(m, nullptr, ec);
  std::vector<RequestOutput> outs(c.prompts.size());
  size_t next = 0;
  for (int step = 0; next < c.prompts.size() || e.has_unfinished(); ++step) {
    while (next < c.prompts.size() && static_cast<int>(next) * 3 <= step) {  // one arrival every 3 steps
      const int64_t id = e.add_request(c.prompts[next], c.params[next]);
      EXPECT_EQ(id, static_cast<int64_t>(next));
      outs[next].outputs.resize(c.params[next].n);
      ++next;
    }
    for (RequestOutput& o : e.step())
      for (CompletionOutput& c2 : o.outputs)
        if (c2.finished()) outs[o.request_id].outputs[c2.index] = std::move(c2);
  }
  return flatten(outs);
}

// Trainer side: prompt + completion of every sample packed in reverse order (a
// different packing than any engine step), forward with autograd on, then THE logprob
// function on the rows that predict each completion token.
std::vector<std::vector<float>> trainer_logprobs(const models::Decoder& m, const Case& c, const Result& r,
                                                 int attn_block_size) {
  std::vector<std::vector<int32_t>> docs;
  std::vector<size_t> prompt_of;
  std::vector<double> temp_of;
  size_t k = 0;
  for (size_t i = 0; i < c.prompts.size(); ++i)
    for (int s = 0; s < c.params[i].n; ++s, ++k) {
      std::vector<int32_t> d = c.prompts[i];
      d.insert(d.end(), r.tokens[k].begin(), r.tokens[k].end());
      docs.push_back(d);
      prompt_of.push_back(i);
      temp_of.push_back(c.params[i].logprob_temperature());
    }
  std::vector<size_t> order(docs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = order.size() - 1 - i;
  std::vector<std::vector<int32_t>> packed;
  for (size_t i : order) packed.push_back(docs[i]);
  models::ForwardBatch fb = models::make_packed_batch(packed);
  fb.attn_block_size = attn_block_size;
  Tensor hidden = m.forward(fb);
  EXPECT_TRUE(hidden.requires_grad());  // the trainer's graph, not an inference shortcut
  std::vector<std::vector<float>> out(docs.size());
  int64_t start = 0;
  for (size_t i : order) {
    const int64_t P = static_cast<int64_t>(c.prompts[prompt_of[i]].size());
    const int64_t n = static_cast<int64_t>(r.tokens[i].size());
    Tensor rows = hidden.narrow(0, start + P - 1, n);
    Tensor tg = Tensor::from_vector(r.tokens[i], {n});
    out[i] = m.logprobs(rows, tg, temp_of[i]).to_vector<float>();  // titan::logprobs (fp32), logprobs_bf16 (bf16)
    start += static_cast<int64_t>(docs[i].size());
  }
  return out;
}

double max_abs_diff(const Result& r, const std::vector<std::vector<float>>& t) {
  double d = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_EQ(r.logprobs[i].size(), t[i].size());
    for (size_t j = 0; j < t[i].size() && j < r.logprobs[i].size(); ++j)
      d = std::max(d, std::fabs(static_cast<double>(r.logprobs[i][j]) - t[i][j]));
  }
  return d;
}

class Parity : public ::testing::Test {
 protected:
  void SetUp() override {
    model = tiny_model(3);
    c = make_case();
  }
  std::unique_ptr<models::Decoder> model;
  Case c;
};

TEST_F(Parity, EngineModesAgreeBitwise) {
  const Result all = run_all_at_once(*model, c, base_config());
  ASSERT_EQ(all.tokens.size(), 9u);  // 6 requests x 1 + 1 request x 3
  for (size_t i = 0; i < all.tokens.size(); ++i) {
    EXPECT_FALSE(all.tokens[i].empty());
    EXPECT_EQ(all.logprobs[i].size(), all.tokens[i].size());
  }
  // The three samples of request 3 share the prompt but are different streams.
  EXPECT_NE(all.tokens[3], all.tokens[4]);

  expect_same(all, run_one_at_a_time(*model, c), "(a) one at a time");
  expect_same(all, run_staggered(*model, c), "(c) staggered arrivals");
  for (int64_t budget : {5, 16, 37}) {
    EngineConfig ec = base_config();
    ec.max_num_batched_tokens = budget;
    expect_same(all, run_all_at_once(*model, c, ec), "(d) chunked prefill, budget " + std::to_string(budget));
  }
  {
    EngineConfig ec = base_config();
    ec.num_kv_blocks = 9;  // 5 blocks for the longest sequence; the others must wait or be preempted
    ec.max_num_batched_tokens = 64;
    EngineStats st;
    expect_same(all, run_all_at_once(*model, c, ec, &st), "(e) preemption by recomputation");
    EXPECT_GT(st.preemptions, 0);
  }
  {
    EngineConfig ec = base_config();
    ec.enable_prefix_caching = false;
    expect_same(all, run_all_at_once(*model, c, ec), "no prefix caching");
  }
  {
    EngineConfig ec = base_config();
    ec.logprobs_from_hidden = true;  // default false: from the sampling logits
    expect_same(all, run_all_at_once(*model, c, ec), "logprobs from the hidden rows (titan::logprobs)");
  }
  {
    const int nt = num_threads();
    set_num_threads(1);
    Result one = run_all_at_once(*model, c, base_config());
    set_num_threads(nt);
    expect_same(all, one, "1 thread");
  }
}

TEST_F(Parity, PrefixCacheIsUsed) {
  // One request at a time: request 4 finds the 2 full blocks it shares with request 3
  // in the prefix table, request 5 one; samples 1 and 2 of request 3 share its 2 full
  // prompt blocks (the 70-token prompt's last token is always recomputed).
  Engine e(*model, nullptr, base_config());
  std::vector<int64_t> cached;
  for (size_t i = 0; i < c.prompts.size(); ++i)
    cached.push_back(e.generate({c.prompts[i]}, {c.params[i]})[0].metrics.num_cached_tokens);
  EXPECT_EQ(cached[3], 0);
  EXPECT_EQ(cached[4], 64);
  EXPECT_EQ(cached[5], 32);
  EXPECT_EQ(e.stats().cached_prompt_tokens, 64 + 32 + 2 * 64);
  EXPECT_EQ(e.block_pool().num_free(), e.block_pool().num_blocks());
}

TEST_F(Parity, TrainerLogprobsEqualGeneratorBitwise) {
  const Result gen = run_all_at_once(*model, c, base_config());
  const auto tr = trainer_logprobs(*model, c, gen, kernels::cpu::kKvBlockSize);
  const double d = max_abs_diff(gen, tr);
  std::printf("generator vs trainer logprobs: max |delta| = %.1f over %zu samples\n", d, tr.size());
  EXPECT_EQ(d, 0.0);
  for (size_t i = 0; i < tr.size(); ++i) EXPECT_TRUE(same_bits(gen.logprobs[i], tr[i])) << "sample " << i;
}

// The generator's load step (Decoder::repack_for_decode, as `titan generate` runs it):
// the layer weights and the LM head (tied: the embedding) in GEMM panels give the same
// tokens and logprob bits as the trainer's (out, in) layout, in the engine modes and
// against the trainer's forward on the unrepacked model; the repacked model refuses a
// differentiable forward.
TEST_F(Parity, RepackedWeightsKeepParity) {
  for (const std::string family : {"llama3", "qwen3"}) {
    std::unique_ptr<models::Decoder> plain = tiny_model(3, family), packed = tiny_model(3, family);
    packed->repack_for_decode();
    ASSERT_TRUE(packed->layers[0]->feed_forward->w2->repacked());
    EXPECT_EQ(packed->layers[1]->attention->wk->weight.dim(), 3);
    ASSERT_TRUE(packed->lm_head_repacked());  // qwen3: the tied embedding; llama3: output
    EXPECT_EQ(packed->tok_embeddings->repacked(), family == "qwen3");
    EXPECT_THROW(packed->lm_head_weight(), Error);
    EXPECT_THROW(models::hf_state_dict(*packed), Error);  // a repacked model cannot be saved
    const Result ref = run_all_at_once(*plain, c, base_config());
    expect_same(ref, run_all_at_once(*packed, c, base_config()),
                family + ": repacked, all at once");
    expect_same(ref, run_staggered(*packed, c), family + ": repacked, staggered arrivals");
    EngineConfig ec = base_config();
    ec.max_num_batched_tokens = 16;
    expect_same(ref, run_all_at_once(*packed, c, ec), family + ": repacked, chunked prefill 16");
    ec = base_config();
    ec.logprobs_from_hidden = true;
    expect_same(ref, run_all_at_once(*packed, c, ec),
                family + ": repacked, logprobs from the hidden rows (logprobs_panels)");
    const Result gen = run_all_at_once(*packed, c, base_config());
    const double d =
        max_abs_diff(gen, trainer_logprobs(*plain, c, gen, kernels::cpu::kKvBlockSize));
    std::printf("%s: repacked generator vs trainer logprobs: max |delta| = %.1f\n", family.c_str(),
                d);
    EXPECT_EQ(d, 0.0);
    try {
      packed->forward(models::make_packed_batch({c.prompts[0]}));
      ADD_FAILURE() << "a differentiable forward through repacked weights did not throw";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("linear_panels: no backward"), std::string::npos)
          << e.what();
    }
  }
}

// bf16 compute (model.compute_dtype = bf16, `titan generate --dtype bf16`): the repacked
// generator's bf16 panels (layers and LM head; a tied head's panels beside the fp32
// embedding) give the unrepacked bf16 model's tokens and logprob bits in the engine modes
// (one at a time, staggered arrivals, chunked prefill mixed with decode, logprobs from the
// hidden rows, 1 thread), and the bf16 trainer's logprobs (logprobs_bf16 with autograd)
// bit for bit; the fp32 trainer's differ.
TEST_F(Parity, Bf16WeightsKeepParityWithTheBf16Trainer) {
  for (const std::string family : {"llama3", "qwen3"}) {
    std::unique_ptr<models::Decoder> plain = tiny_model(3, family), packed = tiny_model(3, family);
    plain->set_compute_bf16(true);
    packed->set_compute_bf16(true);
    packed->repack_for_decode();
    ASSERT_TRUE(packed->lm_head_repacked() && packed->lm_head_bf16()) << family;
    EXPECT_EQ(packed->layers[0]->feed_forward->w2->weight.dtype(), DType::bf16);
    EXPECT_FALSE(packed->tok_embeddings->repacked()) << family;  // the lookup reads fp32 rows
    const Result ref = run_all_at_once(*plain, c, base_config());
    expect_same(ref, run_all_at_once(*packed, c, base_config()), family + ": bf16 panels, all at once");
    expect_same(ref, run_one_at_a_time(*packed, c), family + ": bf16 panels, one at a time");
    expect_same(ref, run_staggered(*packed, c), family + ": bf16 panels, staggered arrivals");
    for (int64_t budget : {5, 16}) {
      EngineConfig ec = base_config();
      ec.max_num_batched_tokens = budget;
      expect_same(ref, run_all_at_once(*packed, c, ec), family + ": bf16 panels, chunked prefill " +
                                                            std::to_string(budget));
    }
    EngineConfig ec = base_config();
    ec.logprobs_from_hidden = true;
    expect_same(ref, run_all_at_once(*packed, c, ec), family + ": bf16 panels, logprobs from the hidden rows");
    {
      const int nt = num_threads();
      set_num_threads(1);
      Result one = run_all_at_once(*packed, c, base_config());
      set_num_threads(nt);
      expect_same(ref, one, family + ": bf16 panels, 1 thread");
    }
    const double d = max_abs_diff(ref, trainer_logprobs(*plain, c, ref, kernels::cpu::kKvBlockSize));
    std::printf("%s: bf16 generator vs bf16 trainer logprobs: max |delta| = %.1f\n", family.c_str(), d);
    EXPECT_EQ(d, 0.0);
    const double d32 = max_abs_diff(ref, trainer_logprobs(*tiny_model(3, family), c, ref, kernels::cpu::kKvBlockSize));
    std::printf("%s: bf16 generator vs fp32 trainer logprobs: max |delta| = %.3g\n", family.c_str(), d32);
    EXPECT_GT(d32, 0.0);
  }
}

TEST_F(Parity, FlippingOneKernelParameterBreaksParity) {
  // Generator side: KV block size 64 instead of 32.
  EngineConfig ec = base_config();
  ec.block_size = 2 * kernels::cpu::kKvBlockSize;
  const Result gen64 = run_all_at_once(*model, c, ec);
  const double d_gen = max_abs_diff(gen64, trainer_logprobs(*model, c, gen64, kernels::cpu::kKvBlockSize));
  // Trainer side: attention visits keys in blocks of 16 instead of 32.
  const Result gen = run_all_at_once(*model, c, base_config());
  const double d_tr = max_abs_diff(gen, trainer_logprobs(*model, c, gen, kernels::cpu::kKvBlockSize / 2));
  std::printf("generator KV block %d vs trainer %d: max |delta| = %.3g\n", 2 * kernels::cpu::kKvBlockSize,
              kernels::cpu::kKvBlockSize, d_gen);
  std::printf("trainer attn_block_size %d vs generator %d: max |delta| = %.3g\n", kernels::cpu::kKvBlockSize / 2,
              kernels::cpu::kKvBlockSize, d_tr);
  EXPECT_GT(d_gen, 0.0);
  EXPECT_GT(d_tr, 0.0);
}

// The same engine modes and trainer parity for Multi-head Latent Attention (deepseek_v3)
// and DeepSeek sparse attention (deepseek_v32): the engine allocates the latent + RoPE-key
// (+ indexer-key) cache the model declares; prefix caching, preemption by recomputation
// and chunked prefill work on its blocks.
void latent_cache_engine_modes(const std::string& family, const char* what) {
  const auto model = tiny_model(3, family);
  ASSERT_NE(model->layers[0]->mla, nullptr);
  const Case c = make_case();
  const Result all = run_all_at_once(*model, c, base_config());
  const std::string w = what;
  expect_same(all, run_one_at_a_time(*model, c), w + ": one at a time");
  expect_same(all, run_staggered(*model, c), w + ": staggered arrivals");
  EngineConfig ec = base_config();
  ec.max_num_batched_tokens = 16;
  expect_same(all, run_all_at_once(*model, c, ec), w + ": chunked prefill, budget 16");
  ec = base_config();
  ec.num_kv_blocks = 9;
  ec.max_num_batched_tokens = 64;
  EngineStats st;
  expect_same(all, run_all_at_once(*model, c, ec, &st), w + ": preemption by recomputation");
  EXPECT_GT(st.preemptions, 0);
  ec = base_config();
  ec.enable_prefix_caching = false;
  expect_same(all, run_all_at_once(*model, c, ec), w + ": no prefix caching");
  {
    Engine e(*model, nullptr, base_config());
    std::vector<int64_t> cached;
    for (size_t i = 0; i < c.prompts.size(); ++i)
      cached.push_back(e.generate({c.prompts[i]}, {c.params[i]})[0].metrics.num_cached_tokens);
    EXPECT_EQ(cached[4], 64);
    EXPECT_EQ(cached[5], 32);
    EXPECT_EQ(e.block_pool().num_free(), e.block_pool().num_blocks());
  }
  const double d = max_abs_diff(all, trainer_logprobs(*model, c, all, kernels::cpu::kKvBlockSize));
  std::printf("%s: generator vs trainer logprobs: max |delta| = %.1f\n", what, d);
  EXPECT_EQ(d, 0.0);
  const auto repacked = tiny_model(3, family);
  repacked->repack_for_decode();
  expect_same(all, run_all_at_once(*repacked, c, base_config()), w + ": repacked weights");
}

TEST(ParityMla, EngineModesPrefixCacheAndTrainerLogprobsBitwise) {
  latent_cache_engine_modes("deepseek_v3", "mla");
  // The generator's KV blocks differ from the trainer's: MLA's flash kernels visit keys
  // block by block, so parity must break.
  const auto model = tiny_model(3, "deepseek_v3");
  const Case c = make_case();
  EngineConfig ec = base_config();
  ec.block_size = 2 * kernels::cpu::kKvBlockSize;
  const Result gen64 = run_all_at_once(*model, c, ec);
  EXPECT_GT(max_abs_diff(gen64, trainer_logprobs(*model, c, gen64, kernels::cpu::kKvBlockSize)), 0.0);
}

TEST(ParityDsa, EngineModesPrefixCacheAndTrainerLogprobsBitwise) {
  latent_cache_engine_modes("deepseek_v32", "dsa");
  // DSA's sparse kernel visits the selected keys one by one, not by KV block: a generator
  // with another block size keeps parity.
  const auto model = tiny_model(3, "deepseek_v32");
  const Case c = make_case();
  EngineConfig ec = base_config();
  ec.block_size = 2 * kernels::cpu::kKvBlockSize;
  const Result gen64 = run_all_at_once(*model, c, ec);
  EXPECT_EQ(max_abs_diff(gen64, trainer_logprobs(*model, c, gen64, kernels::cpu::kKvBlockSize)), 0.0);
}

// Component overrides: the model the engine decodes with and the trainer's forward are
// the same modules, so an override applied to it (apply_generator_overrides, as titan
// generate / serve / rl do) runs on both paths (its forwards are counted on the
// generator's): the generator's logprobs are the trainer's with the override, bit for bit.
// Neither generator-side override changes the forward bits here: rope=composed has the
// fused bits by contract (ops/rope.h), on gqa, mla and dsa, and composed::swiglu =
// mul(silu(gate), up) rounds as the fused forward kernel does (measured: bitwise; only its
// backward differs), so the whole run is bitwise the default one as well.
void expect_override_parity(const std::string& family, const std::string& entry) {
  const std::string component = entry.substr(0, entry.find('='));
  const std::string impl = entry.substr(entry.find('=') + 1);
  const auto plain = tiny_model(3, family);
  const auto model = tiny_model(3, family);
  EXPECT_EQ(models::apply_generator_overrides(*model, {entry}, "test"), std::vector<std::string>{entry + ":*"});
  const Case c = make_case();
  const Result base = run_all_at_once(*plain, c, base_config());
  const int64_t before = models::override_calls(component, impl);
  const Result ovr = run_all_at_once(*model, c, base_config());
  EXPECT_GT(models::override_calls(component, impl) - before, 0) << family << " " << entry << ": not run by the generator";
  const double d = max_abs_diff(ovr, trainer_logprobs(*model, c, ovr, kernels::cpu::kKvBlockSize));
  const double d_plain = max_abs_diff(ovr, trainer_logprobs(*plain, c, ovr, kernels::cpu::kKvBlockSize));
  std::printf("%s %s: generator vs trainer with it max |delta| = %.3g, vs trainer without it %.3g\n", family.c_str(),
              entry.c_str(), d, d_plain);
  EXPECT_EQ(d, 0.0) << family << " " << entry;
  EXPECT_EQ(d_plain, 0.0) << family << " " << entry;
  expect_same(base, ovr, family + " " + entry + " vs default");
}

TEST(ParityOverrides, ComposedSwigluGeneratorEqualsTrainerWithItBitwise) {
  expect_override_parity("llama3", "swiglu=composed");
}

TEST(ParityOverrides, ComposedRopeIsBitwiseTheDefaultOnGqaMlaAndDsa) {
  for (const char* family : {"llama3", "deepseek_v3", "deepseek_v32"})
    expect_override_parity(family, "rope=composed");
}

TEST(ParityOverrides, TrainerOnlyAttentionIsRefusedForTheGenerator) {
  for (const char* family : {"llama3", "deepseek_v3"}) {
    const auto model = tiny_model(3, family);
    try {
      models::apply_generator_overrides(*model, {"rope=composed", "attention=reference:layers.1.*"}, "run/config.toml");
      ADD_FAILURE() << family << ": attention=reference was accepted for the generator";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'attention=reference:layers.1.*' (run/config.toml) runs on the trainer "
                                           "path only"),
                std::string::npos)
          << e.what();
    }
    // Refused before any entry is applied.
    const auto& l0 = *model->layers[0];
    EXPECT_FALSE(l0.attention ? l0.attention->composed_rope : l0.mla->composed_rope) << family;
  }
}

}  // namespace
