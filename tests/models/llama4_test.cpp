// llama4 family vs Hugging Face transformers (the PyPI venv, tests/reference/llama4_ref.py):
// a tiny random Llama4ForCausalLM (text) with chunked attention of 12 positions on a
// 40-token sequence, QK-norm, a NoPE layer with temperature tuning, Llama-3 RoPE scaling
// with low == high frequency factor, top-1 MoE layers with the shared expert and dense
// layers, saved with save_pretrained and loaded into titan: logits within
// 1e-4 · max |logit|; titan's export (config.json + feed_forward.* tensors) reloaded by
// transformers gives the same logits. Also: the Scout / Maverick sizes against Meta's
// published totals, bad configs as one-line errors, the debug recipe's loss falling.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/models/oracle_util.h"
#include "tests/util/venv_python.h"
#include "titan/checkpoint/hf_config.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/config/resolve.h"
#include "titan/models/common/decoder.h"
#include "titan/models/common/layer_spec.h"
#include "titan/models/family.h"
#include "titan/train/trainer.h"

namespace titan::models {
namespace {

namespace fs = std::filesystem;

void run_py(const std::string& args) {
  const std::string cmd = "OMP_NUM_THREADS=1 '" + test::venv_python() + "' '" + std::string(TITAN_SOURCE_DIR) +
                          "/tests/reference/llama4_ref.py' " + args + " > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

// max |a - b| / max |b|.
double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0, m = 0;
  for (size_t i = 0; i < b.size() && i < a.size(); ++i) {
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
    m = std::max(m, std::fabs(static_cast<double>(b[i])));
  }
  return m > 0 ? d / m : d;
}

TEST(Llama4, MatchesTransformersLogitsAndExportReloads) {
  char tmpl[] = "/tmp/titan_llama4_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const fs::path dir(tmpl);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 40; ++i) tokens.push_back((i * 37 + 5) % 128);
  std::ofstream(dir / "batch.json") << nlohmann::json{{"tokens", tokens}}.dump();
  run_py("make '" + dir.string() + "'");

  const TransformerConfig cfg = config_from_hf(load_hf_config(dir.string()));
  EXPECT_EQ(cfg.family, "llama4");
  EXPECT_EQ(cfg.intermediate_size, 48);      // intermediate_size_mlp
  EXPECT_EQ(cfg.moe_intermediate_size, 32);  // HF intermediate_size
  EXPECT_EQ(describe_layers(layer_specs(cfg)),
            "L0 gqa+dense chunk 12, L1 gqa+moe chunk 12, L2 gqa+dense chunk 12, L3 gqa+moe nope");
  Decoder model(cfg);
  load_hf_state_dict(model, load_safetensors((dir / "model.safetensors").string()), dir.string());
  const std::vector<float> got =
      model.logits(model.forward(make_packed_batch({tokens}))).detach().to_vector<float>();
  const std::vector<float> want = test::read_floats(dir / "ref_logits.f32");
  ASSERT_EQ(got.size(), want.size());
  const double err = rel_err(got, want);
  EXPECT_LE(err, 1e-4) << "max |titan - HF| / max |HF logit|";

  // Each Llama 4 flag matters here: turning it off moves the logits far past the tolerance.
  for (const char* flag : {"chunk", "qk_norm", "interleave", "score_before", "temperature"}) {
    TransformerConfig off = cfg;
    const std::string f = flag;
    if (f == "chunk") off.attention_chunk_size = 1 << 20;
    if (f == "qk_norm") off.use_qk_norm = false;
    if (f == "interleave") off.rope_interleave_gqa = false;
    if (f == "score_before") off.score_before_experts = false;
    if (f == "temperature") off.attn_temperature_tuning = false;
    Decoder m2(off);
    load_hf_state_dict(m2, load_safetensors((dir / "model.safetensors").string()), dir.string());
    const double e2 = rel_err(m2.logits(m2.forward(make_packed_batch({tokens}))).detach().to_vector<float>(), want);
    EXPECT_GT(e2, 100 * std::max(err, 1e-7)) << flag << " off";
    std::printf("llama4 tiny without %s: logits rel err %.6g\n", flag, e2);
  }

  const fs::path ex = dir / "export";
  fs::create_directories(ex);
  save_hf_config((ex / "config.json").string(), config_to_hf(cfg));
  const auto exported = hf_state_dict(model);
  EXPECT_EQ(exported.at("model.layers.1.feed_forward.experts.gate_up_proj").shape(), (Shape{4, 64, 64}));
  EXPECT_EQ(exported.at("model.layers.1.feed_forward.experts.down_proj").shape(), (Shape{4, 32, 64}));
  EXPECT_TRUE(exported.count("model.layers.1.feed_forward.router.weight"));
  EXPECT_TRUE(exported.count("model.layers.0.feed_forward.gate_proj.weight"));
  save_safetensors((ex / "model.safetensors").string(), exported);
  run_py("check '" + dir.string() + "' '" + ex.string() + "'");
  const double reload = rel_err(got, test::read_floats(ex / "reload_logits.f32"));
  EXPECT_LE(reload, 1e-4) << "transformers on titan's export";
  // The export reloads into titan with the same config.
  const TransformerConfig again = config_from_hf(load_hf_config(ex.string()));
  EXPECT_EQ(again.layer_types, cfg.layer_types);
  EXPECT_EQ(again.no_rope_layers, cfg.no_rope_layers);
  EXPECT_EQ(again.mlp_only_layers, cfg.mlp_only_layers);
  EXPECT_EQ(again.decoder_sparse_step, cfg.decoder_sparse_step);
  EXPECT_EQ(again.attention_chunk_size, 12);
  EXPECT_EQ(again.rope_scaling.factor, 8.0);
  std::printf("llama4 tiny: logits rel err %.3g, transformers on titan's export %.3g\n", err, reload);
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);  // kept for a look otherwise
}

// Meta's published sizes (ai.meta.com/blog/llama-4-multimodal-intelligence, and the model
// cards at huggingface.co/meta-llama/Llama-4-Scout-17B-16E and -Maverick-17B-128E): Scout
// 109B total / 17B active, Maverick 400B total / 17B active. Those totals include the
// vision encoder; the text model's exact counts follow from the HF text_config values:
// per layer attention 2·D·H·Dh + 2·D·Hkv·Dh and two RMSNorms; an MoE layer a router E·D,
// E experts and one shared expert of 3·D·F (F = intermediate_size 8192); a dense layer
// 3·D·intermediate_size_mlp; untied embedding and LM head V·D each, the final norm D.
TEST(Llama4, FlavorsSizeThemselvesAgainstThePublishedTotals) {
  const int64_t V = 202048, D = 5120, H = 40, Hkv = 8, Dh = 128, L = 48, F = 8192, Fm = 16384;
  const int64_t attn = 2 * D * H * Dh + 2 * D * Hkv * Dh + 2 * D, expert = 3 * D * F, top = 2 * V * D + D;
  auto moe_layer = [&](int64_t E, bool active) { return attn + E * D + ((active ? 1 : E) + 1) * expert; };
  const int64_t dense_layer = attn + 3 * D * Fm;
  struct Want {
    const char* flavor;
    int64_t total, active;
    double published_total, published_active;
  };
  const Want wants[] = {
      {"scout", top + L * moe_layer(16, false), top + L * moe_layer(16, true), 109e9, 17e9},
      {"maverick", top + L / 2 * (moe_layer(128, false) + dense_layer), top + L / 2 * (moe_layer(128, true) + dense_layer),
       400e9, 17e9},
  };
  EXPECT_EQ(wants[0].total, 107769861120);  // the same arithmetic, written out
  EXPECT_EQ(wants[1].total, 400711848960);
  for (const Want& w : wants) {
    const TransformerConfig c = flavor("llama4", w.flavor);
    EXPECT_NO_THROW(c.validate());
    EXPECT_EQ(c.num_params(), w.total) << w.flavor;
    EXPECT_EQ(c.num_active_params(), w.active) << w.flavor;
    // The text model is within 2% of the published (text + vision) totals.
    EXPECT_NEAR(static_cast<double>(c.num_params()) / w.published_total, 1.0, 0.02) << w.flavor;
    EXPECT_NEAR(static_cast<double>(c.num_active_params()) / w.published_active, 1.0, 0.02) << w.flavor;
    std::printf("llama4 %s: %lld parameters (%.2fB; published %.0fB), %lld active (%.2fB; published %.0fB), "
                "%.3g training FLOPs/token at 8192\n",
                w.flavor, static_cast<long long>(c.num_params()), c.num_params() / 1e9, w.published_total / 1e9,
                static_cast<long long>(c.num_active_params()), c.num_active_params() / 1e9,
                w.published_active / 1e9, c.train_flops_per_token(8192));
  }
  const TransformerConfig s = flavor("llama4", "scout");
  EXPECT_EQ(describe_layers(layer_specs(s)).rfind("L0-2 gqa+moe chunk 8192, L3 gqa+moe nope, L4-6 gqa+moe chunk", 0),
            0u);
  EXPECT_EQ(layer_specs(flavor("llama4", "maverick"))[1].ffn, FfnKind::moe);
  EXPECT_EQ(layer_specs(flavor("llama4", "maverick"))[0].ffn, FfnKind::dense);
  // A chunked layer attends at most attention_chunk_size keys: FLOPs at 8192 and 32768
  // differ only through the NoPE (global) layers.
  const double d = s.train_flops_per_token(32768) - s.train_flops_per_token(8192);
  EXPECT_DOUBLE_EQ(d, 6.0 * (L / 4) * H * 2.0 * Dh * (32768 - 8192));
}

nlohmann::json good_config() {
  return {{"architectures", {"Llama4ForCausalLM"}}, {"model_type", "llama4_text"}, {"vocab_size", 64},
          {"hidden_size", 32}, {"intermediate_size", 16}, {"intermediate_size_mlp", 24},
          {"num_hidden_layers", 4}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 8},
          {"num_local_experts", 4}, {"interleave_moe_layer_step", 2}, {"attention_chunk_size", 8},
          {"max_position_embeddings", 64}};
}

void expect_error(const nlohmann::json& j, const std::string& needle) {
  try {
    config_from_hf(parse_hf_config(j, "test"));
    ADD_FAILURE() << "no error for " << needle;
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(needle), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST(Llama4, BadConfigsAreOneLineErrorsNamingTheField) {
  const TransformerConfig ok = config_from_hf(parse_hf_config(good_config(), "test"));
  EXPECT_EQ(ok.layer_types, (std::vector<std::string>{"chunked_attention", "chunked_attention", "chunked_attention",
                                                      "full_attention"}));
  EXPECT_EQ(ok.mlp_only_layers, std::vector<int64_t>{});
  EXPECT_TRUE(ok.is_moe_layer(1) && ok.is_moe_layer(3) && !ok.is_moe_layer(0));
  nlohmann::json j = good_config();
  j["attention_chunk_size"] = 0;
  expect_error(j, "attention_chunk_size must be >= 1 (or null = off), got 0");
  j["attention_chunk_size"] = nullptr;  // null: no chunked layers
  EXPECT_EQ(config_from_hf(parse_hf_config(j, "test")).layer_chunk(0), 0);
  j = good_config();
  j["layer_types"] = {"chunked_attention", "sliding_attention", "full_attention", "full_attention"};
  expect_error(j, "layer_types entry \"sliding_attention\" is not a Llama 4 layer type");
  j = good_config();
  j["layer_types"] = {"full_attention", "full_attention"};
  expect_error(j, "layer_types has 2 entries, num_hidden_layers is 4");
  j = good_config();
  j["no_rope_layers"] = {1, 0};
  expect_error(j, "no_rope_layers has 2 entries, num_hidden_layers is 4");
  j = good_config();
  j["interleave_moe_layer_step"] = 0;
  expect_error(j, "interleave_moe_layer_step must be >= 1, got 0");
  j = good_config();
  j["moe_layers"] = {1, 7};
  expect_error(j, "moe_layers has layer 7 outside [0, 4)");
  j = good_config();
  j["moe_layers"] = {0, 2};
  const TransformerConfig moe02 = config_from_hf(parse_hf_config(j, "test"));
  EXPECT_TRUE(moe02.is_moe_layer(0) && moe02.is_moe_layer(2) && !moe02.is_moe_layer(1) && !moe02.is_moe_layer(3));
  j = good_config();
  j["router_jitter_noise"] = 0.1;
  expect_error(j, "router_jitter_noise = 0.1 is not supported");
  j = good_config();
  j["hidden_act"] = "gelu";
  expect_error(j, "hidden_act 'gelu' is not supported");
  j = good_config();
  j["attention_bias"] = true;
  expect_error(j, "attention_bias = true is not supported");
  j = good_config();
  j["num_local_experts"] = 0;
  expect_error(j, "num_local_experts must be >= 1, got 0");
  // titan's own validation of the same fields (a TOML / flavor config).
  TransformerConfig c = flavor("llama4", "debugmodel");
  c.attention_chunk_size = 0;
  try {
    c.validate();
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer_types[0] is chunked_attention but attention_chunk_size = 0"),
              std::string::npos)
        << e.what();
  }
  c.attention_chunk_size = -3;
  EXPECT_THROW(c.validate(), Error);
}

// `titan train --recipe llama4_debugmodel` on the shipped text: the loss falls.
TEST(Llama4, DebugRecipeLossFalls) {
  const fs::path dump = fs::path(::testing::TempDir()) / ("titan_llama4_train_" + std::to_string(getpid()));
  fs::remove_all(dump);
  config::JobConfig job = config::resolve_config(
      "llama4_debugmodel", std::nullopt,
      {"--validation.enabled=false", "--checkpoint.enable=false", "--job.dump_folder=" + dump.string(),
       "--model.hf_config=" + std::string(TITAN_SOURCE_DIR) + "/recipes/llama4_debugmodel.json"});
  train::Trainer trainer(job);
  trainer.train();
  std::vector<double> loss;
  std::ifstream f(dump / "metrics.jsonl");
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("loss")) loss.push_back(j["loss"].get<double>());
  }
  ASSERT_GE(loss.size(), 20u);
  std::printf("llama4_debugmodel: loss %.4f -> %.4f over %zu steps\n", loss.front(), loss.back(), loss.size());
  EXPECT_LT(loss.back(), loss.front() - 1.0);  // bytes: ~ln 256 = 5.5 at init
  fs::remove_all(dump);
}

}  // namespace
}  // namespace titan::models
