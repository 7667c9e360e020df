// Shared helpers of the generator tests: a tiny random-init decoder and prompt sets.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "titan/core/philox.h"
#include "titan/infer/engine.h"
#include "titan/models/common/decoder.h"

namespace titan::infer::testing {

// llama3-style, GQA 4/2 heads, Dh 16, 2 layers, vocab 101, context 192 (deepseek_v3: MLA;
// deepseek_v32: MLA + DeepSeek sparse attention).
inline models::TransformerConfig tiny_config(const std::string& family = "llama3") {
  models::TransformerConfig c;
  c.family = family;
  c.vocab_size = 101;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 192;
  c.rope_theta = 10000;
  if (family == "qwen3") {
    c.qk_norm = true;
    c.tie_word_embeddings = true;
  }
  if (family == "deepseek_v3" || family == "deepseek_v32") {  // MLA: 4 heads, latent 32, nope 16 + rope 16, v 24, q_proj
    c.num_key_value_heads = 4;
    c.kv_lora_rank = 32;
    c.qk_nope_head_dim = 16;
    c.qk_rope_head_dim = 16;
    c.v_head_dim = 24;
  }
  if (family == "deepseek_v32") {  // + DSA: q low-rank 32, indexer 4 heads of 32 keeping 8 keys
    c.q_lora_rank = 32;
    c.index_topk = 8;
    c.index_n_heads = 4;
    c.index_head_dim = 32;
  }
  return c;
}

inline std::unique_ptr<models::Decoder> tiny_model(uint64_t seed = 3, const std::string& family = "llama3") {
  auto m = std::make_unique<models::Decoder>(tiny_config(family));
  m->init_weights(seed);
  return m;
}

// Deterministic pseudo-random tokens in [1, V).
inline std::vector<int32_t> random_tokens(int64_t n, uint64_t seed, int64_t V = 101) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = 1 + static_cast<int32_t>(philox_draw(seed, i)[0] % (V - 1));
  return t;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// The (tokens, logprobs) of every sample of every request, in order.
struct Result {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> logprobs;
  std::vector<std::string> finish;
};

inline Result flatten(const std::vector<RequestOutput>& outs) {
  Result r;
  for (const auto& o : outs)
    for (const auto& c : o.outputs) {
      r.tokens.push_back(c.token_ids);
      r.logprobs.push_back(c.logprobs);
      r.finish.push_back(finish_reason_name(c.finish_reason));
    }
  return r;
}

inline void expect_same(const Result& a, const Result& b, const std::string& what) {
  ASSERT_EQ(a.tokens.size(), b.tokens.size()) << what;
  for (size_t i = 0; i < a.tokens.size(); ++i) {
    EXPECT_EQ(a.tokens[i], b.tokens[i]) << what << ": sample " << i;
    EXPECT_TRUE(same_bits(a.logprobs[i], b.logprobs[i])) << what << ": logprob bits of sample " << i;
    EXPECT_EQ(a.finish[i], b.finish[i]) << what << ": finish reason of sample " << i;
  }
}

}  // namespace titan::infer::testing
