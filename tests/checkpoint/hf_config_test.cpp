#include "titan/checkpoint/hf_config.h"

#include <gtest/gtest.h>

#include "tests/checkpoint/helpers.h"
#include "titan/core/fs.h"
#include "titan/models/family.h"

using namespace titan;
using namespace titan::test;
using json = nlohmann::json;

namespace {

// Published config.json of Qwen/Qwen3-0.6B.
const char* kQwen3_06B = R"({
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 1024,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "max_position_embeddings": 40960,
  "max_window_layers": 28,
  "model_type": "qwen3",
  "num_attention_heads": 16,
  "num_hidden_layers": 28,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": null,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

// Published config.json of meta-llama/Llama-3.2-1B, without head_dim (older
// transformers did not write it) to exercise the hidden/heads default.
const char* kLlama32_1B = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 8192,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 16,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 32.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

}  // namespace

TEST(HFConfig, Qwen3_06B) {
  HFConfig c = parse_hf_config(json::parse(kQwen3_06B), "qwen3");
  EXPECT_TRUE(c.is_qwen3());
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.intermediate_size, 3072);
  EXPECT_EQ(c.num_hidden_layers, 28);
  EXPECT_EQ(c.num_attention_heads, 16);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);  // != hidden / heads = 64
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_FALSE(c.rope_scaling.has_value());
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_EQ(c.eos_token_id, std::vector<int64_t>{151645});
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.extra["hidden_act"], "silu");
  EXPECT_TRUE(c.extra.contains("sliding_window"));
  EXPECT_FALSE(c.extra.contains("hidden_size"));
  // Export reproduces the file (numbers compare by value: 1000000 == 1e6).
  EXPECT_EQ(hf_config_to_json(c), json::parse(kQwen3_06B));
}

TEST(HFConfig, Llama32_1B) {
  HFConfig c = parse_hf_config(json::parse(kLlama32_1B), "llama");
  EXPECT_TRUE(c.is_llama());
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.intermediate_size, 8192);
  EXPECT_EQ(c.num_hidden_layers, 16);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 64);  // default hidden / heads
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope_theta, 500000.0);
  ASSERT_TRUE(c.rope_scaling.has_value());
  EXPECT_EQ(c.rope_scaling->rope_type, "llama3");
  EXPECT_EQ(c.rope_scaling->factor, 32.0);
  EXPECT_EQ(c.rope_scaling->low_freq_factor, 1.0);
  EXPECT_EQ(c.rope_scaling->high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling->original_max_position_embeddings, 8192);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.eos_token_id, std::vector<int64_t>{128001});
  json back = hf_config_to_json(c);
  EXPECT_EQ(back["head_dim"], 64);
  back.erase("head_dim");
  EXPECT_EQ(back, json::parse(kLlama32_1B));
}

TEST(HFConfig, FileRoundTripAndVariants) {
  TempDir d;
  write_raw(d / "config.json", kLlama32_1B);
  HFConfig a = load_hf_config(d.path);  // a directory works too
  a.eos_token_id = {128001, 128008, 128009};  // instruct models list several
  save_hf_config(d / "out.json", a);
  HFConfig b = load_hf_config(d / "out.json");
  EXPECT_EQ(hf_config_to_json(a), hf_config_to_json(b));
  EXPECT_EQ(b.eos_token_id, (std::vector<int64_t>{128001, 128008, 128009}));

  // transformers v5 spelling: "dtype" and "rope_parameters"; minimal fields get defaults.
  json j = {{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 64},  {"intermediate_size", 128},
            {"num_hidden_layers", 2},                {"num_attention_heads", 4}, {"vocab_size", 100},
            {"dtype", "float32"},
            {"rope_parameters", {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 8.0},
                                 {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                                 {"original_max_position_embeddings", 8192}}}};
  HFConfig v = parse_hf_config(j, "v5");
  EXPECT_EQ(v.torch_dtype, "float32");
  EXPECT_EQ(v.rope_theta, 500000.0);
  ASSERT_TRUE(v.rope_scaling);
  EXPECT_EQ(v.rope_scaling->factor, 8.0);
  EXPECT_EQ(v.num_key_value_heads, 4);
  EXPECT_EQ(v.head_dim, 16);
  EXPECT_EQ(v.max_position_embeddings, 2048);  // LlamaConfig default
  EXPECT_EQ(v.model_type, "llama");
  EXPECT_FALSE(v.extra.contains("rope_parameters"));
  j.erase("architectures");
  j["model_type"] = "qwen3";
  EXPECT_TRUE(parse_hf_config(j, "mt").is_qwen3());  // inferred from model_type
}

TEST(HFConfig, Errors) {
  TempDir d;
  const std::string p = d / "config.json";
  auto with = [&](const std::function<void(json&)>& edit) {
    json j = json::parse(kLlama32_1B);
    edit(j);
    write_raw(p, j.dump());
  };
  auto load = [&] { load_hf_config(p); };
  EXPECT_TRUE(throws_with([&] { load_hf_config(d / "missing.json"); }, {"config.json", "missing.json", "file not found"}));
  write_raw(p, "{\"hidden_size\": ");
  EXPECT_TRUE(throws_with(load, {p, "malformed JSON"}));
  with([](json& j) { j["architectures"] = {"MistralForCausalLM"}; });
  EXPECT_TRUE(throws_with(load, {p, "unsupported architecture 'MistralForCausalLM'",
                                 "supported: LlamaForCausalLM, Qwen3ForCausalLM"}));
  with([](json& j) { j.erase("architectures"); j["model_type"] = "gemma"; });
  EXPECT_TRUE(throws_with(load, {p, "model_type 'gemma'", "LlamaForCausalLM"}));
  with([](json& j) { j.erase("hidden_size"); });
  EXPECT_TRUE(throws_with(load, {p, "missing required field 'hidden_size'"}));
  with([](json& j) { j["num_hidden_layers"] = "16"; });
  EXPECT_TRUE(throws_with(load, {p, "field 'num_hidden_layers' must be an integer, got \"16\""}));
  with([](json& j) { j["num_key_value_heads"] = 5; });
  EXPECT_TRUE(throws_with(load, {p, "num_key_value_heads (5)", "divide num_attention_heads (32)"}));
  with([](json& j) { j["vocab_size"] = 0; });
  EXPECT_TRUE(throws_with(load, {p, "'vocab_size' must be positive"}));
  with([](json& j) { j["rope_scaling"] = {{"rope_type", "longrope"}, {"factor", 4.0}}; });
  EXPECT_TRUE(throws_with(load, {p, "unsupported rope_scaling rope_type 'longrope'", "llama3, yarn"}));
  with([](json& j) { j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; });
  EXPECT_TRUE(throws_with(load, {p, "rope_type yarn needs a positive 'original_max_position_embeddings'"}));
  with([](json& j) { j["rope_scaling"].erase("low_freq_factor"); });
  EXPECT_TRUE(throws_with(load, {p, "missing 'low_freq_factor'"}));
  with([](json& j) { j["tie_word_embeddings"] = 1; });
  EXPECT_TRUE(throws_with(load, {p, "'tie_word_embeddings' must be true or false"}));
  with([](json& j) { j["hidden_size"] = 2047; });
  EXPECT_TRUE(throws_with(load, {p, "no head_dim", "2047", "not divisible"}));
}

// Keys that change the math and that no family models are refused when the model is
// built, never ignored: transformers would compute another function.
TEST(HFConfig, UnmodelledActivationAndMlpBiasAreRefused) {
  auto build = [](const std::function<void(json&)>& edit) {
    json j = json::parse(kLlama32_1B);
    edit(j);
    models::config_from_hf(parse_hf_config(j, "cfg"));
  };
  build([](json&) {});  // the published config builds
  build([](json& j) { j["mlp_bias"] = false; });
  EXPECT_TRUE(throws_with([&] { build([](json& j) { j["hidden_act"] = "gelu"; }); },
                          {"hidden_act \"gelu\" is not supported for LlamaForCausalLM", "silu"}));
  EXPECT_TRUE(throws_with([&] { build([](json& j) { j["mlp_bias"] = true; }); }, {"mlp_bias true is not supported"}));
  // transformers builds from model_type: a Mistral config labelled LlamaForCausalLM is a Mistral there.
  EXPECT_TRUE(throws_with([&] { build([](json& j) { j["model_type"] = "mistral"; }); },
                          {"model_type 'mistral' is not one titan knows for LlamaForCausalLM (llama)"}));
}
