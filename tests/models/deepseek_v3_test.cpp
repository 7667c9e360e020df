// deepseek_v3 / kimi_k2 families vs Hugging Face transformers (the PyPI venv): a tiny
// random DeepseekV3ForCausalLM (MLA with YaRN RoPE, q low-rank and q_proj variants) saved
// with save_pretrained and loaded into titan through its config.json and safetensors;
// logits of two packed sequences within 1e-4 · max |logit|, the gradient of every
// parameter within 1e-4 · max |HF gradient|; titan's export reloaded by transformers. The
// generator's latent cache: prefill == token-by-token decode bitwise, batch invariance
// (1, 7, 257 tokens; 1 and 2 threads). Sizing of the published 671B / 1T configs against
// transformers' own count on the meta device. Bad configs are one-line errors.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "tests/models/cache_util.h"
#include "tests/util/expect_error.h"
#include "tests/models/oracle_util.h"
#include "tests/util/titan_exe.h"
#include "tests/util/venv_python.h"
#include "titan/autograd/node.h"
#include "titan/checkpoint/hf_config.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/core/thread_pool.h"
#include "titan/models/common/decoder.h"
#include "titan/models/common/overrides.h"
#include "titan/models/family.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/reduce.h"

namespace titan::models {
namespace {

namespace fs = std::filesystem;

// Layers of the tiny oracle model (of 2) with a dense feed-forward: layer 1 is
// DeepSeek-MoE (sigmoid group-limited router, shared expert).
constexpr int kDenseLayers = 1;

std::string ref_script() { return std::string(TITAN_SOURCE_DIR) + "/tests/reference/deepseek_v3_ref.py"; }

std::string run_py(const std::string& args) { return test::run_reference(ref_script(), args); }

using test::read_floats;

std::vector<std::vector<int32_t>> sequences() { return test::oracle_sequences(); }

using test::rel_err;

// overrides: component overrides applied to the titan model (models/common/overrides.h);
// the oracle bound holds for them too.
void oracle(int q_lora, const std::vector<std::string>& overrides = {}) {
  char tmpl[] = "/tmp/titan_dsv3_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const fs::path dir(tmpl);
  const auto seqs = sequences();
  std::ofstream(dir / "tokens.json") << nlohmann::json(seqs).dump();
  const int64_t T = 79, V = 128;
  const Tensor G = Tensor::randn({T, V}, 77);
  {
    std::ofstream g(dir / "g.bin", std::ios::binary);
    g.write(reinterpret_cast<const char*>(G.data<float>()), T * V * 4);
  }
  run_py("make '" + dir.string() + "' " + std::to_string(q_lora) + " " + std::to_string(kDenseLayers));
  const TransformerConfig cfg = config_from_hf(load_hf_config(dir.string()));
  EXPECT_EQ(cfg.family, "deepseek_v3");
  EXPECT_EQ(cfg.rope_scaling.rope_type, "yarn");
  EXPECT_EQ(describe_layers(layer_specs(cfg)), kDenseLayers == 2 ? "L0-1 mla+dense" : "L0 mla+dense, L1 mla+moe");
  Decoder model(cfg);
  load_hf_state_dict(model, load_safetensors((dir / "model.safetensors").string()), dir.string());
  apply_overrides(model, overrides);
  const ForwardBatch b = make_packed_batch(seqs);
  Tensor logits = model.logits(model.forward(b));
  sum(mul(logits, G)).backward();
  const std::vector<float> got = logits.detach().to_vector<float>();
  const double err = rel_err(got, read_floats(dir / "logits.bin"));
  EXPECT_LE(err, 1e-4) << "max |titan - HF| / max |HF logit|";
  std::printf("deepseek_v3 tiny (q_lora_rank %d%s%s): logits max |titan - HF| / max |logit| = %.3g\n", q_lora,
              overrides.empty() ? "" : ", overrides ", fmt::format("{}", fmt::join(overrides, ",")).c_str(), err);
  const auto hf_grads = load_safetensors((dir / "grads.safetensors").string());
  // The routed experts are stacked in titan ((E, ., .)) and fused or per expert in HF,
  // so the HF gradients are read by name through the state-dict adapter (the one that
  // loaded the weights above) into a model of the same shape.
  Decoder hf_grad(cfg);
  load_hf_state_dict(hf_grad, hf_grads, "grads.safetensors");
  const auto want = hf_grad.named_parameters();
  const auto got_params = model.named_parameters();
  ASSERT_EQ(want.size(), got_params.size());
  double worst = 0;
  std::string worst_name;
  for (size_t i = 0; i < got_params.size(); ++i) {
    const auto& [name, p] = got_params[i];
    ASSERT_EQ(want[i].first, name);
    ASSERT_TRUE(p.grad().defined()) << name;
    const double e = rel_err(p.grad().to_vector<float>(), want[i].second.to_vector<float>());
    EXPECT_LE(e, 1e-4) << name;
    if (e > worst) worst = e, worst_name = name;
  }
  std::printf("  gradients: worst max |titan - HF| / max |HF grad| = %.3g (%s)\n", worst, worst_name.c_str());

  const fs::path ex = dir / "export";
  fs::create_directories(ex);
  save_hf_config((ex / "config.json").string(), config_to_hf(cfg));
  save_safetensors((ex / "model.safetensors").string(), hf_state_dict(model));
  fs::copy_file(dir / "tokens.json", ex / "tokens.json");
  run_py("logits '" + ex.string() + "'");
  EXPECT_LE(rel_err(got, read_floats(ex / "logits.bin")), 1e-4) << "transformers on titan's export";
  EXPECT_EQ(config_from_hf(load_hf_config(ex.string())).q_lora_rank, cfg.q_lora_rank);
  fs::remove_all(dir);
}

TEST(DeepseekV3, LogitsAndGradientsMatchTransformersQLora) { oracle(32); }
TEST(DeepseekV3, LogitsAndGradientsMatchTransformersQProj) { oracle(0); }
// The MLA component overrides: the composed reference attention core and the composed RoPE.
TEST(DeepseekV3, LogitsAndGradientsMatchTransformersWithMlaOverrides) {
  const int64_t before = override_calls("attention", "reference");
  oracle(32, {"attention=reference", "rope=composed"});
  EXPECT_EQ(override_calls("attention", "reference") - before, 2);  // both layers, one forward
}

// ---- generator: the latent cache.

TransformerConfig small_mla() {
  TransformerConfig c = flavor("deepseek_v3", "debugmodel_dense");
  c.vocab_size = 96;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_hidden_layers = 2;
  c.max_position_embeddings = 512;
  c.rope_scaling.rope_type = "yarn";
  c.rope_scaling.factor = 8;
  c.rope_scaling.original_max_position_embeddings = 64;
  c.rope_scaling.mscale = 1.0;
  c.rope_scaling.mscale_all_dim = 0.7;
  return c;
}

using test::tokens_of;

using test::generate_hidden;
using test::train_hidden;
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) { return test::same_float_bits(a, b); }

TEST(DeepseekV3, LatentCachePrefillEqualsDecodeBitwise) {
  Decoder m(small_mla());
  m.init_weights(3);
  autograd::NoGradGuard ng;
  const auto spec = m.cache_spec(32);
  ASSERT_EQ(spec[0].paged.size(), 2u);
  EXPECT_EQ(spec[0].paged[0].name, "latent");
  EXPECT_EQ(spec[0].paged[0].shape, (std::vector<int64_t>{32, 64}));  // (B, kv_lora_rank)
  EXPECT_EQ(spec[0].paged[1].shape, (std::vector<int64_t>{32, 16}));  // (B, qk_rope_head_dim)
  // (kv_lora_rank + rope) floats per token and layer: 80 · 4 · 2 layers.
  EXPECT_EQ(cache_bytes_per_block(spec) / 32, 80 * 4 * 2);
  test::expect_prefill_equals_decode(m);
}

TEST(DeepseekV3, BatchInvariance1_7_257TokensAnd1_2Threads) {
  Decoder m(small_mla());
  m.init_weights(4);
  test::expect_batch_invariant_1_7_257(m);
}

// ---- sizing.

TEST(DeepseekV3, PublishedShapesSizeThemselvesAsTransformersCounts) {
  struct Case {
    const char *family, *flavor;
    double total_lo, total_hi, active_lo, active_hi;
  };
  // DeepSeek-V3: "671B total parameters with 37B activated" (without the 14B MTP module).
  // Kimi K2: published as 1T / 1.04T total, 32B activated; its config.json gives 1.026T in
  // transformers' count, which titan's must equal exactly.
  for (const Case& k : {Case{"deepseek_v3", "671B", 670e9, 672e9, 36.5e9, 37.9e9},
                        Case{"kimi_k2", "1T", 1.02e12, 1.05e12, 31.5e9, 33e9}}) {
    const TransformerConfig c = flavor(k.family, k.flavor);
    c.validate();
    const double total = static_cast<double>(c.num_params()), active = static_cast<double>(c.num_active_params());
    EXPECT_GE(total, k.total_lo) << k.family;
    EXPECT_LE(total, k.total_hi) << k.family;
    EXPECT_GE(active, k.active_lo) << k.family;
    EXPECT_LE(active, k.active_hi) << k.family;
    const auto hf = nlohmann::json::parse(run_py(std::string("count ") + k.flavor));
    EXPECT_EQ(c.num_params(), hf.at("total").get<int64_t>()) << k.family << ": transformers on the meta device";
    EXPECT_EQ(c.num_active_params(), hf.at("active").get<int64_t>()) << k.family;
    // TorchTitan's count: 6 x the matmul parameters a token uses (no embedding, no norms)
    // plus the attention term 6 · L · H · (qk + v head dims) · seq_len.
    const double D = static_cast<double>(c.hidden_size), L = static_cast<double>(c.num_hidden_layers);
    const double norms = L * (2 * D + static_cast<double>(c.kv_lora_rank + c.q_lora_rank)) + D;
    const double matmul = active - static_cast<double>(c.vocab_size) * D - norms;
    const double attn = 6 * L * static_cast<double>(c.num_attention_heads) *
                        static_cast<double>(c.qk_nope_head_dim + c.qk_rope_head_dim + c.v_head_dim) * 4096;
    EXPECT_DOUBLE_EQ(c.train_flops_per_token(4096), 6 * matmul + attn) << k.family;
    std::printf("%s %s: %.4g total, %.4g active parameters, %.4g train FLOPs/token at 4096\n", k.family, k.flavor,
                total, active, c.train_flops_per_token(4096));
  }
}

// Every flavor written as config.json and read back gives the same config (kimi_k2 keeps
// its model_type under DeepseekV3ForCausalLM).
TEST(DeepseekV3, FlavorsRoundTripThroughConfigJson) {
  for (const char* fam : {"deepseek_v3", "kimi_k2"})
    for (const auto& [name, c] : family(fam).flavors) {
      const HFConfig h = config_to_hf(c);
      EXPECT_EQ(h.architecture(), "DeepseekV3ForCausalLM");
      EXPECT_EQ(h.model_type, fam);
      const TransformerConfig r = config_from_hf(parse_hf_config(hf_config_to_json(h), name));
      EXPECT_EQ(r.family, c.family) << name;
      EXPECT_EQ(r.num_params(), c.num_params()) << fam << " " << name;
      EXPECT_EQ(r.num_active_params(), c.num_active_params()) << fam << " " << name;
      EXPECT_EQ(r.q_lora_rank, c.q_lora_rank);
      EXPECT_EQ(r.kv_lora_rank, c.kv_lora_rank);
      EXPECT_EQ(r.v_head_dim, c.v_head_dim);
      EXPECT_EQ(r.n_group, c.n_group);
      EXPECT_EQ(r.topk_group, c.topk_group);
      EXPECT_EQ(r.first_k_dense_replace, c.first_k_dense_replace);
      EXPECT_EQ(r.routed_scaling_factor, c.routed_scaling_factor);
      EXPECT_EQ(r.rope_scaling.rope_type, c.rope_scaling.rope_type);
      EXPECT_EQ(r.rope_scaling.factor, c.rope_scaling.factor);
      EXPECT_EQ(r.rope_scaling.mscale_all_dim, c.rope_scaling.mscale_all_dim);
      EXPECT_EQ(r.rope_scaling.beta_fast, c.rope_scaling.beta_fast);
      EXPECT_EQ(describe_layers(layer_specs(r)), describe_layers(layer_specs(c)));
    }
  EXPECT_EQ(describe_layers(layer_specs(flavor("deepseek_v3", "debugmodel"))), "L0 mla+dense, L1-3 mla+moe");
}

// ---- bad configs.

nlohmann::json good_config() {
  return {{"architectures", {"DeepseekV3ForCausalLM"}}, {"model_type", "deepseek_v3"}, {"vocab_size", 128},
          {"hidden_size", 64}, {"intermediate_size", 96}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
          {"q_lora_rank", nullptr}, {"kv_lora_rank", 32}, {"qk_rope_head_dim", 16}, {"qk_nope_head_dim", 16},
          {"v_head_dim", 24}, {"n_routed_experts", 4}, {"num_experts_per_tok", 2}, {"n_group", 2},
          {"topk_group", 1}, {"moe_intermediate_size", 32}, {"first_k_dense_replace", 2}};
}

void expect_error(const nlohmann::json& j, const std::string& needle) {
  test::expect_one_line_error([&] { config_from_hf(parse_hf_config(j, "test")); }, needle);
}

TEST(DeepseekV3, BadHfConfigsAreOneLineErrorsNamingTheField) {
  EXPECT_NO_THROW(config_from_hf(parse_hf_config(good_config(), "test")));
  auto j = good_config();
  j["model_type"] = "deepseek_v9";
  expect_error(j, "model_type 'deepseek_v9'");
  j = good_config();
  j.erase("kv_lora_rank");
  expect_error(j, "missing required field 'kv_lora_rank'");
  j = good_config();
  j.erase("q_lora_rank");
  expect_error(j, "'q_lora_rank'");
  j = good_config();
  j["n_routed_experts"] = 6;
  j["n_group"] = 4;
  expect_error(j, "n_routed_experts (6) must be divisible by n_group (4)");
  j = good_config();
  j["topk_group"] = 3;
  expect_error(j, "topk_group (3) must be <= n_group (2)");
  j = good_config();
  j["num_experts_per_tok"] = 5;
  expect_error(j, "num_experts_per_tok (5)");
  j = good_config();
  j["qk_nope_head_dim"] = 300;
  expect_error(j, "head-dim limit");
  j = good_config();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  expect_error(j, "original_max_position_embeddings");
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 64},
                       {"truncate", 0}};
  expect_error(j, "truncate");
}

TEST(DeepseekV3, BadConfigOnTheCommandLineExits2) {
  char tmpl[] = "/tmp/titan_dsv3_bad_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir(tmpl);
  auto j = good_config();
  j.erase("v_head_dim");
  std::ofstream(dir + "/config.json") << j.dump();
  const std::string cmd = "'" + test::titan_exe() + "' train --recipe deepseek_v3_dense_debugmodel --model.hf_config='" +
                          dir + "/config.json' --job.dump_folder='" + dir + "/out' > '" + dir + "/log.txt' 2>&1";
  const int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc));
  EXPECT_EQ(WEXITSTATUS(rc), 2);
  std::ifstream f(dir + "/log.txt");
  std::string all((std::istreambuf_iterator<char>(f)), {});
  EXPECT_NE(all.find("missing required field 'v_head_dim'"), std::string::npos) << all;
  fs::remove_all(dir);
}

// deepseek_v3_dense_debugmodel (MLA, dense feed-forwards) and deepseek_v3_debugmodel (MLA,
// one dense layer, then sigmoid-routed MoE layers) on the shipped text.
class DeepseekV3Recipe : public ::testing::TestWithParam<std::string> {};

TEST_P(DeepseekV3Recipe, LossFallsAndGenerates) {
  const std::string recipe = GetParam();
  char tmpl[] = "/tmp/titan_dsv3_train_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir(tmpl);
  const std::string cmd = "'" + test::titan_exe() + "' train --recipe " + recipe + " --job.dump_folder='" +
                          dir + "' --checkpoint.enable=true --validation.enabled=false > '" + dir + "/log.txt' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  // titan generate on the trained checkpoint: the engine's latent cache, greedy decode.
  const std::string gen = "'" + test::titan_exe() + "' generate --checkpoint '" + dir +
                          "/checkpoint/step-30' --prompt ROMEO: --max-tokens 40 --temperature 0 > '" + dir +
                          "/gen.txt' 2>&1";
  ASSERT_EQ(std::system(gen.c_str()), 0) << gen;
  std::ifstream g(dir + "/gen.txt");
  const std::string gen_out((std::istreambuf_iterator<char>(g)), {});
  EXPECT_NE(gen_out.find("ROMEO:"), std::string::npos) << gen_out;
  EXPECT_NE(gen_out.find("40 generated tokens"), std::string::npos) << gen_out;
  std::vector<double> loss;
  std::ifstream f(dir + "/metrics.jsonl");
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("loss")) loss.push_back(j["loss"].get<double>());
  }
  ASSERT_GE(loss.size(), 20u);
  std::printf("%s: loss %.4f -> %.4f over %zu steps\n", recipe.c_str(), loss.front(), loss.back(), loss.size());
  EXPECT_LT(loss.back(), loss.front() - 1.0);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Recipes, DeepseekV3Recipe,
                         ::testing::Values("deepseek_v3_dense_debugmodel", "deepseek_v3_debugmodel"));

}  // namespace
}  // namespace titan::models
