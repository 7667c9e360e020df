// gemma2 and gemma3 families vs Hugging Face transformers (the PyPI venv): a tiny random
// Gemma2ForCausalLM (alternating sliding-window / global layers, attention and final
// logit soft-caps, query_pre_attn_scalar, sandwich norms, gain-centred norms, GeGLU,
// embeddings scaled by sqrt(hidden)) and Gemma3ForCausalLM (QK-norm, local / global RoPE
// thetas) saved with save_pretrained and loaded into titan;
// logits of two packed sequences (70 and 9 tokens, window 8) within 1e-4 · max |logit|,
// the gradient of every parameter within 1e-4 · max |HF gradient|; each variant flag
// turned off moves the logits (none is silently ignored); titan's export reloaded by
// transformers. Bad variant configs are one-line errors; the full-size flavors count
// the published parameters; the debug recipe's loss falls.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/models/oracle_util.h"
#include "tests/util/expect_error.h"
#include "tests/util/titan_exe.h"
#include "tests/util/venv_python.h"
#include "titan/autograd/node.h"
#include "titan/checkpoint/hf_config.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/models/common/decoder.h"
#include "titan/models/family.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/reduce.h"

namespace titan::models {
namespace {

namespace fs = std::filesystem;

std::string ref_script() { return std::string(TITAN_SOURCE_DIR) + "/tests/reference/gemma_ref.py"; }

void run_py(const std::string& args) {
  const std::string cmd = "OMP_NUM_THREADS=1 '" + test::venv_python() + "' '" + ref_script() + "' " + args;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

using test::read_floats;

// max |a - b| / max |b|.
double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, m = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
    m = std::max(m, std::fabs(static_cast<double>(b[i])));
  }
  return m > 0 ? d / m : d;
}

using Edit = void (*)(TransformerConfig&);

void oracle(const std::string& fam, const std::string& layout,
            const std::vector<std::pair<const char*, Edit>>& ablations) {
  char tmpl[] = "/tmp/titan_gemma_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const fs::path dir(tmpl);
  const auto seqs = test::oracle_sequences();
  std::ofstream(dir / "tokens.json") << nlohmann::json(seqs).dump();
  const int64_t T = 79, V = 128;
  const Tensor G = Tensor::randn({T, V}, 77);
  {
    std::ofstream g(dir / "g.bin", std::ios::binary);
    g.write(reinterpret_cast<const char*>(G.data<float>()), T * V * 4);
  }
  run_py("make '" + dir.string() + "' " + fam);
  const TransformerConfig cfg = config_from_hf(load_hf_config(dir.string()));
  EXPECT_EQ(cfg.family, fam);
  EXPECT_EQ(describe_layers(layer_specs(cfg)), layout);
  EXPECT_EQ(cfg.final_logit_softcapping, 3.0);
  Decoder model(cfg);
  const auto weights = load_safetensors((dir / "model.safetensors").string());
  load_hf_state_dict(model, weights, dir.string());
  const ForwardBatch b = make_packed_batch(seqs);
  Tensor logits = model.logits(model.forward(b));
  sum(mul(logits, G)).backward();
  const std::vector<float> got = logits.detach().to_vector<float>();
  const std::vector<float> want = read_floats(dir / "logits.bin");
  ASSERT_EQ(got.size(), want.size());
  const double err = rel_err(got, want);
  EXPECT_LE(err, 1e-4) << "max |titan - HF| / max |HF logit|";
  std::printf("%s tiny: logits max |titan - HF| / max |logit| = %.3g\n", fam.c_str(), err);

  Decoder hf_grad(cfg);
  load_hf_state_dict(hf_grad, load_safetensors((dir / "grads.safetensors").string()), "grads.safetensors");
  const auto want_g = hf_grad.named_parameters();
  const auto params = model.named_parameters();
  ASSERT_EQ(want_g.size(), params.size());
  double worst = 0;
  std::string worst_name;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& [name, p] = params[i];
    ASSERT_EQ(want_g[i].first, name);
    ASSERT_TRUE(p.grad().defined()) << name;
    const double e = rel_err(p.grad().to_vector<float>(), want_g[i].second.to_vector<float>());
    EXPECT_LE(e, 1e-4) << name;
    if (e > worst) worst = e, worst_name = name;
  }
  std::printf("  gradients: worst max |titan - HF| / max |HF grad| = %.3g (%s)\n", worst, worst_name.c_str());

  // Each variant flag off (same weights): the logits move well past the tolerance.
  autograd::NoGradGuard ng;
  for (const auto& [what, edit] : ablations) {
    TransformerConfig c = cfg;
    edit(c);
    Decoder m(c);
    load_hf_state_dict(m, weights, dir.string());
    const double d = rel_err(m.logits(m.forward(b)).to_vector<float>(), want);
    std::printf("  without %s: %.3g\n", what, d);
    EXPECT_GT(d, 1e-2) << what;
  }

  const fs::path ex = dir / "export";
  fs::create_directories(ex);
  save_hf_config((ex / "config.json").string(), config_to_hf(cfg));
  save_safetensors((ex / "model.safetensors").string(), hf_state_dict(model));
  fs::copy_file(dir / "tokens.json", ex / "tokens.json");
  run_py("logits '" + ex.string() + "' " + fam);
  EXPECT_LE(rel_err(got, read_floats(ex / "logits.bin")), 1e-4) << "transformers on titan's export";
  const TransformerConfig back = config_from_hf(load_hf_config(ex.string()));
  EXPECT_EQ(back.layer_types, cfg.layer_types);
  EXPECT_EQ(back.sliding_window, 8);
  EXPECT_EQ(back.query_pre_attn_scalar, 24.0);
  EXPECT_EQ(back.rope_local_base_freq, cfg.rope_local_base_freq);
  EXPECT_EQ(back.rope_theta, cfg.rope_theta);
  fs::remove_all(dir);
}

TEST(Gemma2, LogitsAndGradientsMatchTransformersAndExportReloads) {
  oracle("gemma2", "L0 gqa+dense window 8, L1 gqa+dense, L2 gqa+dense window 8, L3 gqa+dense",
         {{"attn_logit_softcapping", [](TransformerConfig& c) { c.attn_logit_softcapping = 0; }},
          {"final_logit_softcapping", [](TransformerConfig& c) { c.final_logit_softcapping = 0; }},
          {"sliding window", [](TransformerConfig& c) { c.layer_types.assign(4, "full_attention"); }},
          {"query_pre_attn_scalar", [](TransformerConfig& c) { c.query_pre_attn_scalar = 0; }},
          {"embedding_multiplier", [](TransformerConfig& c) { c.embedding_multiplier = 1; }},
          {"gelu", [](TransformerConfig& c) { c.hidden_act = "silu"; }},
          {"gain-centred norms", [](TransformerConfig& c) { c.norm_unit_offset = false; }}});
}

TEST(Gemma3, LogitsAndGradientsMatchTransformersAndExportReloads) {
  oracle("gemma3", "L0-1 gqa+dense window 8, L2 gqa+dense, L3 gqa+dense window 8",
         {{"rope_local_base_freq", [](TransformerConfig& c) { c.rope_local_base_freq = 0; }},
          {"qk_norm", [](TransformerConfig& c) { c.qk_norm = false; }},
          {"sliding window", [](TransformerConfig& c) { c.layer_types.assign(4, "full_attention"); }},
          {"final_logit_softcapping", [](TransformerConfig& c) { c.final_logit_softcapping = 0; }}});
}

TEST(Gemma2, BadVariantConfigsAreOneLineErrors) {
  auto expect_error = [](const TransformerConfig& c, const std::string& needle) {
    test::expect_one_line_error([&] { c.validate(); }, needle);
  };
  const TransformerConfig d = flavor("gemma2", "debugmodel");
  d.validate();
  TransformerConfig c = d;
  c.layer_types[3] = "local_attention";
  expect_error(c, "layer_types[3] = 'local_attention'");
  c = d;
  c.layer_types.pop_back();
  expect_error(c, "layer_types has 7 entries");
  c = d;
  c.sliding_window = 0;
  expect_error(c, "layer_types[0] is sliding_attention but sliding_window = 0");
  c = d;
  c.sliding_window = -4;
  expect_error(c, "sliding_window");
  c = d;
  c.attn_logit_softcapping = -1;
  expect_error(c, "attn_logit_softcapping");
  c = d;
  c.hidden_act = "relu";
  expect_error(c, "hidden_act 'relu'");
  c = d;
  c.no_rope_layers = {1, 0};
  expect_error(c, "no_rope_layers has 2 entries");
  c = d;
  c.pre_norms = c.post_norms = false;
  expect_error(c, "pre_norms and post_norms");
}

TEST(Gemma, FullSizeFlavorsCountThePublishedParameters) {
  // transformers' Gemma2ForCausalLM / Gemma3ForCausalLM on the meta device for
  // google/gemma-2-{2b,9b,27b} and google/gemma-3-1b-pt (tests/reference/gemma_ref.py
  // count); the model cards say 2.6B, 9.2B, 27.2B and 1B.
  EXPECT_EQ(flavor("gemma2", "gemma2_2b").num_params(), 2'614'341'888);
  EXPECT_EQ(flavor("gemma2", "gemma2_9b").num_params(), 9'241'705'984);
  EXPECT_EQ(flavor("gemma2", "gemma2_27b").num_params(), 27'227'128'320);
  EXPECT_EQ(flavor("gemma3", "gemma3_1b").num_params(), 999'885'952);
  flavor("gemma3", "debugmodel").validate();
}

TEST(Gemma2, DebugRecipeLossFalls) {
  char tmpl[] = "/tmp/titan_gemma2_train_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir(tmpl);
  const std::string cmd = "'" + test::titan_exe() + "' train --recipe gemma2_debugmodel --job.dump_folder='" + dir +
                          "' --checkpoint.enable=true --checkpoint.interval=30 --validation.enabled=false > '" + dir +
                          "/log.txt' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<double> loss;
  std::ifstream f(dir + "/metrics.jsonl");
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("loss")) loss.push_back(j["loss"].get<double>());
  }
  ASSERT_GE(loss.size(), 20u);
  std::printf("gemma2_debugmodel: loss %.4f -> %.4f over %zu steps\n", loss.front(), loss.back(), loss.size());
  EXPECT_LT(loss.back(), loss.front() - 1.0);
  const std::string gen = "'" + test::titan_exe() + "' generate --checkpoint '" + dir +
                          "/checkpoint' --prompt 'ROMEO:' --max-tokens 40 --temperature 0 --ignore-eos > '" + dir +
                          "/gen.txt' 2> '" + dir + "/gen_err.txt'";
  ASSERT_EQ(std::system(gen.c_str()), 0) << gen;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace titan::models
