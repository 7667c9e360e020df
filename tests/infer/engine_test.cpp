// Engine behaviour: bad requests fail alone, stop conditions, streaming, abort,
// seeds, context limits, and the block pool returning to full after 1000 random
// requests with aborts and preemptions.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "infer_test_util.h"
#include "titan/core/philox.h"
#include "titan/data/byte_tokenizer.h"
#include "titan/data/tokenizer.h"

using namespace titan;
using namespace titan::infer;
using namespace titan::infer::testing;

namespace {

SamplingParams greedy(int64_t max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  return p;
}

EngineConfig small_config() {
  EngineConfig ec;
  ec.kv_cache_bytes = 4 << 20;
  return ec;
}

TEST(Engine, BadRequestsFailAloneWithAClearError) {
  auto m = tiny_model();
  Engine e(*m, nullptr, small_config());
  const auto good = random_tokens(20, 1);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;
  auto add = [&](std::vector<int32_t> p, SamplingParams sp) {
    prompts.push_back(std::move(p));
    params.push_back(sp);
  };
  add(good, greedy(8));                                      // 0 ok
  add(random_tokens(192, 2), greedy(8));                     // 1 as long as the context
  add(good, greedy(0));                                      // 2 max_tokens <= 0
  SamplingParams bad_p = greedy(8);
  bad_p.temperature = 1.0;
  bad_p.top_p = 1.5;
  add(good, bad_p);                                          // 3 top_p outside (0, 1]
  add({5, 101, 7}, greedy(8));                               // 4 unknown token id
  add({5, -1}, greedy(8));                                   // 5 negative id
  add({}, greedy(8));                                        // 6 empty
  SamplingParams stop = greedy(8);
  stop.stop = {"x"};
  add(good, stop);                                           // 7 stop strings without a tokenizer
  add(random_tokens(50, 3), greedy(8));                      // 8 ok
  const auto outs = e.generate(prompts, params);
  ASSERT_EQ(outs.size(), prompts.size());
  const std::map<size_t, std::string> expected = {
      {1, "request 1: the prompt has 192 tokens, the model's context is 192 (no room for a generated token)"},
      {2, "SamplingParams.max_tokens must be >= 1, got 0"},
      {3, "SamplingParams.top_p must be in (0, 1], got 1.5"},
      {4, "request 4: prompt token 1 = 101 is outside the vocabulary [0, 101)"},
      {5, "request 5: prompt token 1 = -1 is outside the vocabulary [0, 101)"},
      {6, "request 6: the prompt is empty"},
      {7, "request 7: stop strings need a tokenizer (the engine has none)"}};
  for (size_t i = 0; i < outs.size(); ++i) {
    ASSERT_EQ(outs[i].outputs.size(), 1u) << i;
    const CompletionOutput& c = outs[i].outputs[0];
    if (expected.count(i)) {
      EXPECT_EQ(c.finish_reason, FinishReason::error) << i;
      EXPECT_EQ(c.error, expected.at(i)) << i;
      EXPECT_TRUE(c.token_ids.empty());
    } else {
      EXPECT_EQ(c.finish_reason, FinishReason::length) << i;
      EXPECT_EQ(c.token_ids.size(), 8u) << i;
    }
  }
  // The good requests' tokens are those of a clean engine.
  Engine clean(*m, nullptr, small_config());
  EXPECT_EQ(clean.generate({good}, greedy(8))[0].outputs[0].token_ids, outs[0].outputs[0].token_ids);
  EXPECT_EQ(e.block_pool().num_free(), e.block_pool().num_blocks());
}

TEST(Engine, CacheTooSmallForTheRequest) {
  auto m = tiny_model();
  {
    EngineConfig ec;
    ec.kv_cache_bytes = 1000;  // less than one block
    Engine e(*m, nullptr, ec);
    EXPECT_EQ(e.num_kv_blocks(), 0);
    auto o = e.generate({random_tokens(4, 1)}, greedy(4));
    EXPECT_EQ(o[0].outputs[0].finish_reason, FinishReason::error);
    EXPECT_EQ(o[0].outputs[0].error,
              "prompt of 4 tokens needs 1 KV-cache blocks of 32 tokens, the cache has 0 (generator.kv_cache_bytes)");
  }
  {
    EngineConfig ec;
    ec.num_kv_blocks = 2;
    Engine e(*m, nullptr, ec);
    auto o = e.generate({random_tokens(70, 1), random_tokens(10, 2), random_tokens(40, 3)}, greedy(40));
    EXPECT_EQ(o[0].outputs[0].finish_reason, FinishReason::error);  // 3 blocks > 2
    EXPECT_EQ(o[1].outputs[0].finish_reason, FinishReason::length);
    EXPECT_EQ(o[1].outputs[0].token_ids.size(), 40u);
    // 40 + 40 tokens need 3 blocks: the sequence fills the pool and stops there.
    EXPECT_EQ(o[2].outputs[0].finish_reason, FinishReason::length);
    EXPECT_EQ(o[2].outputs[0].token_ids.size(), 64u - 40u + 1u);
    EXPECT_EQ(e.block_pool().num_free(), 2);
  }
}

// The engine holds host_alloc's cache at host_cache_bytes while it lives (auto: 5 % of
// fp32 weights + KV pool), and not at all with 0; a bad value is a clear error.
TEST(Engine, HoldsTheHostCacheWhileItLives) {
  auto m = tiny_model();
  const size_t before = host_cache_limit();
  {
    EngineConfig ec = small_config();
    Engine e(*m, nullptr, ec);
    const int64_t want = (m->num_parameters() * 4 + e.kv_cache_bytes()) / 20;
    EXPECT_EQ(e.host_cache_bytes(), want);
    EXPECT_EQ(host_cache_limit(), std::max(before, static_cast<size_t>(want)));
  }
  EXPECT_EQ(host_cache_limit(), before);
  {
    EngineConfig ec = small_config();
    ec.host_cache_bytes = 0;
    Engine e(*m, nullptr, ec);
    EXPECT_EQ(host_cache_limit(), before);
  }
  EngineConfig bad = small_config();
  bad.host_cache_bytes = -2;
  try {
    Engine e(*m, nullptr, bad);
    ADD_FAILURE() << "host_cache_bytes = -2 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "Engine: host_cache_bytes must be >= -1 (-1 = auto), got -2");
  }
  EXPECT_EQ(host_cache_limit(), before);
}

TEST(Engine, StopsAtTheModelContext) {
  auto m = tiny_model();
  Engine e(*m, nullptr, small_config());
  auto o = e.generate({random_tokens(189, 4)}, greedy(50));
  EXPECT_EQ(o[0].outputs[0].finish_reason, FinishReason::length);
  EXPECT_EQ(o[0].outputs[0].token_ids.size(), 3u);  // 189 + 3 = 192 positions
}

TEST(Engine, StreamingDeltasAddUpAndAbortFinishesOneRequest) {
  auto m = tiny_model();
  Engine e(*m, nullptr, small_config());
  SamplingParams p;
  p.temperature = 0.9;
  p.seed = 3;
  p.max_tokens = 30;
  p.logprobs = 2;
  const int64_t a = e.add_request(random_tokens(40, 1), p);
  const int64_t b = e.add_request(random_tokens(12, 2), p);
  std::vector<int32_t> streamed;
  std::vector<float> streamed_lp;
  CompletionOutput final_a, final_b;
  int steps = 0;
  while (e.has_unfinished()) {
    if (++steps == 6) e.abort(b);
    for (RequestOutput& o : e.step())
      for (CompletionOutput& c : o.outputs) {
        if (o.request_id == a) {
          streamed.insert(streamed.end(), c.new_token_ids.begin(), c.new_token_ids.end());
          streamed_lp.insert(streamed_lp.end(), c.new_logprobs.begin(), c.new_logprobs.end());
          EXPECT_EQ(c.new_top_logprobs.size(), c.new_token_ids.size());
        }
        if (c.finished()) (o.request_id == a ? final_a : final_b) = c;
      }
  }
  EXPECT_EQ(final_a.finish_reason, FinishReason::length);
  EXPECT_EQ(final_a.token_ids, streamed);
  EXPECT_TRUE(same_bits(final_a.logprobs, streamed_lp));
  EXPECT_EQ(final_a.top_logprobs.size(), 30u);
  EXPECT_EQ(final_b.finish_reason, FinishReason::abort);
  EXPECT_LT(final_b.token_ids.size(), 30u);
  e.abort(a);  // finished: ignored
  EXPECT_TRUE(e.step().empty());
  EXPECT_EQ(e.block_pool().num_free(), e.block_pool().num_blocks());
}

TEST(Engine, GreedyTopLogprobIsTheSampledLogprob) {
  auto m = tiny_model();
  Engine e(*m, nullptr, small_config());
  SamplingParams p = greedy(10);
  p.logprobs = 3;
  auto c = e.generate({random_tokens(9, 9)}, p)[0].outputs[0];
  ASSERT_EQ(c.top_logprobs.size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(c.top_logprobs[i][0].first, c.token_ids[i]);
    EXPECT_TRUE(same_bits({c.top_logprobs[i][0].second}, {c.logprobs[i]}));
    EXPECT_GE(c.top_logprobs[i][0].second, c.top_logprobs[i][1].second);
  }
}

TEST(Engine, SeedsAndSamples) {
  auto m = tiny_model();
  SamplingParams p;
  p.temperature = 1.0;
  p.max_tokens = 12;
  p.n = 3;
  const auto prompt = random_tokens(35, 5);
  EngineConfig ec = small_config();
  ec.seed = 77;
  auto run = [&](uint64_t engine_seed, std::optional<uint64_t> seed, int extra_before) {
    EngineConfig c2 = ec;
    c2.seed = engine_seed;
    Engine e(*m, nullptr, c2);
    std::vector<std::vector<int32_t>> prompts(extra_before, random_tokens(7, 8));
    prompts.push_back(prompt);
    SamplingParams q = p;
    q.seed = seed;
    return flatten(std::vector<RequestOutput>{e.generate(prompts, q).back()});
  };
  const Result seeded = run(77, 42, 0);
  EXPECT_NE(seeded.tokens[0], seeded.tokens[1]);  // samples are independent streams
  EXPECT_NE(seeded.tokens[1], seeded.tokens[2]);
  expect_same(seeded, run(5, 42, 2), "explicit seed: other engine seed and neighbours");
  // Without a seed: drawn from the engine seed and the admission number.
  const Result unseeded = run(77, {}, 0);
  expect_same(unseeded, run(77, {}, 0), "derived seed, same engine seed");
  EXPECT_NE(unseeded.tokens[0], run(78, {}, 0).tokens[0]);
}

TEST(Engine, StopStringsEosAndStopTokens) {
  // Byte vocabulary: text is visible. Vocab 259 = 256 bytes + bos/eos/pad.
  auto tok = data::load_tokenizer("byte");
  models::TransformerConfig cfg = tiny_config();
  cfg.vocab_size = 259;
  models::Decoder m(cfg);
  m.init_weights(21);
  {  // only printable ASCII can win: zero the LM-head rows of all other bytes
    float* w = m.lm_head_weight().data<float>();
    for (int64_t v = 0; v < cfg.vocab_size; ++v)
      if (v < 32 || v >= 127)
        for (int64_t d = 0; d < cfg.hidden_size; ++d) w[v * cfg.hidden_size + d] = 0.0f;
  }
  const std::vector<int32_t> prompt = tok->encode("Hello there, ");
  SamplingParams p = greedy(24);
  p.ignore_eos = true;
  EngineConfig ec = small_config();
  Engine e(m, tok.get(), ec);
  const CompletionOutput full = e.generate({prompt}, p)[0].outputs[0];
  ASSERT_EQ(full.token_ids.size(), 24u);
  EXPECT_EQ(full.text, tok->decode(full.token_ids));
  ASSERT_EQ(full.text.size(), 24u);  // one printable byte per token
  // Stop string: the 2 bytes at tokens 10, 11 of the greedy completion.
  SamplingParams ps = p;
  ps.stop = {full.text.substr(10, 2), "\x01\x02never"};
  const size_t first = full.text.find(ps.stop[0]);
  const CompletionOutput s = e.generate({prompt}, ps)[0].outputs[0];
  EXPECT_EQ(s.finish_reason, FinishReason::stop);
  EXPECT_EQ(s.stop_reason, ps.stop[0]);
  EXPECT_EQ(s.text, full.text.substr(0, first));
  EXPECT_EQ(s.token_ids.size(), first + 2);
  ps.include_stop_str_in_output = true;
  EXPECT_EQ(e.generate({prompt}, ps)[0].outputs[0].text, full.text.substr(0, first + 2));
  // Streaming with a stop string never shows text after the stop.
  {
    SamplingParams pst = ps;
    pst.include_stop_str_in_output = false;
    e.add_request(prompt, pst);
    std::string streamed;
    while (e.has_unfinished())
      for (auto& o : e.step())
        for (auto& c : o.outputs) streamed += c.new_text;
    EXPECT_EQ(streamed, full.text.substr(0, first));
  }
  // A stop token id and EOS: the token is in token_ids, not in the text.
  SamplingParams pt = p;
  pt.stop_token_ids = {full.token_ids[5]};
  const size_t at = std::find(full.token_ids.begin(), full.token_ids.end(), full.token_ids[5]) - full.token_ids.begin();
  const CompletionOutput st = e.generate({prompt}, pt)[0].outputs[0];
  EXPECT_EQ(st.finish_reason, FinishReason::stop);
  EXPECT_EQ(st.token_ids.size(), at + 1);
  EXPECT_EQ(st.stop_reason, "token " + std::to_string(full.token_ids[5]));
  EXPECT_EQ(st.text, tok->decode(std::vector<int32_t>(full.token_ids.begin(), full.token_ids.begin() + at)));
  EngineConfig eos_cfg = ec;
  eos_cfg.eos_token_ids = {full.token_ids[5]};
  Engine e2(m, tok.get(), eos_cfg);
  const CompletionOutput eo = e2.generate({prompt}, greedy(24))[0].outputs[0];
  EXPECT_EQ(eo.finish_reason, FinishReason::stop);
  EXPECT_EQ(eo.stop_reason, "eos");
  EXPECT_EQ(eo.token_ids.size(), at + 1);
}

// 1000 random requests (lengths, n, params, aborts) through a tiny pool: every block
// comes back, and nothing throws.
TEST(Engine, PoolReturnsToFullAfterManyRandomRequests) {
  models::TransformerConfig cfg = tiny_config();
  cfg.num_hidden_layers = 1;
  cfg.hidden_size = 32;
  cfg.intermediate_size = 32;
  cfg.num_attention_heads = 2;
  cfg.num_key_value_heads = 1;
  models::Decoder m(cfg);
  m.init_weights(5);
  EngineConfig ec;
  ec.num_kv_blocks = 14;
  ec.block_size = 16;
  ec.max_num_seqs = 12;
  ec.max_num_batched_tokens = 64;
  ec.seed = 9;
  Engine e(m, nullptr, ec);
  uint64_t ctr = 0;
  auto rnd = [&](uint32_t n) { return philox_draw(2024, ctr++)[0] % n; };
  int added = 0, finished = 0, aborted = 0, errors = 0;
  std::vector<int64_t> live;
  while (added < 1000 || e.has_unfinished()) {
    for (int k = rnd(4); k > 0 && added < 1000; --k, ++added) {
      SamplingParams p;
      p.temperature = rnd(3) == 0 ? 0.0 : 0.5 + 0.1 * rnd(10);
      p.top_p = rnd(2) ? 1.0 : 0.8;
      p.top_k = rnd(3) == 0 ? 5 : 0;
      p.n = 1 + rnd(3);
      p.max_tokens = 1 + rnd(20);
      if (rnd(50) == 0) p.max_tokens = 0;  // a bad one now and then
      std::vector<int32_t> prompt = random_tokens(1 + rnd(rnd(8) == 0 ? 250 : 60), ctr++);
      live.push_back(e.add_request(prompt, p));
    }
    if (!live.empty() && rnd(10) == 0) e.abort(live[rnd(static_cast<uint32_t>(live.size()))]);
    for (const RequestOutput& o : e.step()) {
      for (const CompletionOutput& c : o.outputs) {
        if (!c.finished()) continue;
        ++finished;
        aborted += c.finish_reason == FinishReason::abort;
        errors += c.finish_reason == FinishReason::error;
      }
      if (o.finished) live.erase(std::find(live.begin(), live.end(), o.request_id));
    }
  }
  EXPECT_TRUE(live.empty());
  EXPECT_EQ(e.block_pool().num_free(), e.block_pool().num_blocks());
  EXPECT_GT(e.stats().preemptions, 0);
  EXPECT_GT(aborted, 0);
  EXPECT_GT(errors, 0);  // max_tokens 0 and prompts longer than the pool (14 x 16 tokens)
  EXPECT_GE(finished, 1000);
  std::printf("1000 requests: %d samples finished (%d aborted, %d errors), %lld preemptions, %lld steps\n", finished,
              aborted, errors, static_cast<long long>(e.stats().preemptions), static_cast<long long>(e.stats().steps));
}

}  // namespace

// A vocabulary padded past the tokenizer (vocab_size 264 over byte_chat's 263 ids, as
// tensor parallelism pads it): the padded id is never drawn nor listed, even where its
// logit is the largest, and logprobs keep the full 264-entry normalizer. The head's real
// rows are zero (every real logit 0) and the padded row is large, so wherever the
// reported logprob is below log(1/263) - 0.5 the padded logit exceeds 5 and argmax over
// all 264 logits would have been the padded id.
TEST(Engine, NeverSamplesIdsTheTokenizerLacks) {
  models::TransformerConfig cfg = tiny_config();
  cfg.vocab_size = 264;
  models::Decoder m(cfg);
  m.init_weights(5);
  ASSERT_NE(m.output, nullptr);
  const data::ByteTokenizer tok(true);
  ASSERT_EQ(tok.vocab_size(), 263);
  float* w = m.output->weight.data<float>();
  const int64_t D = cfg.hidden_size;
  for (int64_t i = 0; i < 263 * D; ++i) w[i] = 0.0f;
  for (int64_t d = 0; d < D; ++d) w[263 * D + d] *= 1000.0f;
  Engine e(m, &tok, small_config());
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(random_tokens(12, 40 + i, 256));
  SamplingParams sampled;
  sampled.temperature = 1.0;
  sampled.max_tokens = 16;
  sampled.seed = 7;
  sampled.logprobs = 3;
  int padded_would_win = 0;
  SamplingParams g = greedy(16);
  g.ignore_eos = sampled.ignore_eos = true;
  for (const SamplingParams& p : {g, sampled}) {
    const auto outs = e.generate(prompts, p);
    for (const auto& o : outs)
      for (const auto& c : o.outputs) {
        EXPECT_EQ(finish_reason_name(c.finish_reason), std::string("length")) << c.error;
        ASSERT_EQ(c.token_ids.size(), 16u);
        for (size_t i = 0; i < c.token_ids.size(); ++i) {
          EXPECT_LT(c.token_ids[i], 263);
          if (c.logprobs[i] < -std::log(263.0) - 0.5) ++padded_would_win;
          for (const auto& [id, lp] : p.logprobs > 0 ? c.top_logprobs[i] : TopLogprobs{}) EXPECT_LT(id, 263);
        }
      }
  }
  EXPECT_GT(padded_would_win, 20);  // of 192 tokens
  EXPECT_EQ(e.block_pool().num_free(), e.num_kv_blocks());
}
