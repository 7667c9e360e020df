// gpt_oss family vs Hugging Face transformers (the PyPI venv): a tiny random
// GptOssForCausalLM (alternating sliding-window 8 / full layers, sinks, q/k/v/o biases,
// YaRN with truncate = false, 4 biased experts of which 2 per token behind a biased
// router, the clamped SwiGLU with swiglu_limit 0.5) saved with save_pretrained and
// loaded into titan: logits of two packed sequences (70 and 9 tokens) within
// 1e-4 · max |logit|, the gradient of every parameter within 1e-4 · max |HF gradient|;
// titan's export reloaded by transformers gives the same logits. The clamped SwiGLU
// (ops/activation.h swiglu_oai) against GptOssExperts._apply_gate and torch autograd.
// The full-size flavors count the published parameters; bad configs are one-line
// errors; the debug recipe's loss falls.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/models/oracle_util.h"
#include "tests/util/titan_exe.h"
#include "tests/util/venv_python.h"
#include "titan/autograd/node.h"
#include "titan/checkpoint/hf_config.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/models/common/decoder.h"
#include "titan/models/family.h"
#include "titan/ops/activation.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/reduce.h"

namespace titan::models {
namespace {

namespace fs = std::filesystem;

std::string ref_script() { return std::string(TITAN_SOURCE_DIR) + "/tests/reference/gpt_oss_ref.py"; }

std::string py() { return "OMP_NUM_THREADS=1 '" + test::venv_python() + "' '" + ref_script() + "' "; }

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

TEST(GptOss, LogitsAndGradientsMatchTransformersAndExportReloads) {
  char tmpl[] = "/tmp/titan_gpt_oss_XXXXXX";
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
  const std::string make = py() + "make '" + dir.string() + "'";
  ASSERT_EQ(std::system(make.c_str()), 0) << make;
  const TransformerConfig cfg = config_from_hf(load_hf_config(dir.string()));
  EXPECT_EQ(cfg.family, "gpt_oss");
  EXPECT_EQ(cfg.expert_act, "swiglu_oai");
  EXPECT_EQ(cfg.swiglu_limit, 0.5);
  EXPECT_EQ(cfg.scoring_func, "softmax_topk");
  EXPECT_FALSE(cfg.rope_scaling.truncate);
  EXPECT_EQ(describe_layers(layer_specs(cfg)),
            "L0 gqa+moe window 8, L1 gqa+moe, L2 gqa+moe window 8, L3 gqa+moe");
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
  std::printf("gpt_oss tiny: logits max |titan - HF| / max |logit| = %.3g\n", err);

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

  // Without the clamp (a limit far above every pre-activation) the logits move.
  {
    autograd::NoGradGuard ng;
    TransformerConfig c = cfg;
    c.swiglu_limit = 1e6;
    Decoder m(c);
    load_hf_state_dict(m, weights, dir.string());
    const double d = rel_err(m.logits(m.forward(b)).to_vector<float>(), want);
    std::printf("  without the swiglu clamp: %.3g\n", d);
    EXPECT_GT(d, 1e-2);
  }

  const fs::path ex = dir / "export";
  fs::create_directories(ex);
  save_hf_config((ex / "config.json").string(), config_to_hf(cfg));
  save_safetensors((ex / "model.safetensors").string(), hf_state_dict(model));
  fs::copy_file(dir / "tokens.json", ex / "tokens.json");
  const std::string reload = py() + "logits '" + ex.string() + "'";
  ASSERT_EQ(std::system(reload.c_str()), 0) << reload;
  const double back_err = rel_err(got, read_floats(ex / "logits.bin"));
  std::printf("  transformers on titan's export: %.3g\n", back_err);
  EXPECT_LE(back_err, 1e-4) << "transformers on titan's export";
  const TransformerConfig back = config_from_hf(load_hf_config(ex.string()));
  EXPECT_EQ(back.layer_types, cfg.layer_types);
  EXPECT_EQ(back.num_params(), cfg.num_params());
  EXPECT_EQ(back.swiglu_limit, 0.5);
  EXPECT_FALSE(back.rope_scaling.truncate);
  fs::remove_all(dir);
}

TEST(GptOss, ClampedSwigluMatchesTorchAutograd) {
  // Gate and up values on both sides of the clamp (limit 0.5 as the tiny oracle model).
  const int64_t n = 64;
  const Tensor gate0 = scale(Tensor::randn({n}, 5), 1.0), up0 = scale(Tensor::randn({n}, 6), 1.0);
  char tmpl[] = "/tmp/titan_gpt_oss_act_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const fs::path dir(tmpl);
  {
    std::ofstream f(dir / "in.bin", std::ios::binary);
    f.write(reinterpret_cast<const char*>(gate0.data<float>()), n * 4);
    f.write(reinterpret_cast<const char*>(up0.data<float>()), n * 4);
  }
  const std::string cmd = py() + "act " + std::to_string(n) + " < '" + (dir / "in.bin").string() + "' > '" +
                          (dir / "out.json").string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(dir / "out.json"));
  Tensor gate = gate0.clone(), up = up0.clone();
  gate.requires_grad_(true);
  up.requires_grad_(true);
  std::vector<float> w(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) w[static_cast<size_t>(i)] = static_cast<float>(i + 1);
  Tensor out = swiglu_oai(gate, up, 1.702, 0.5);
  sum(mul(out, Tensor::from_vector(w, {n}))).backward();
  const auto o = out.detach().to_vector<float>(), dg = gate.grad().to_vector<float>(), du = up.grad().to_vector<float>();
  int clamped = 0;
  for (int64_t i = 0; i < n; ++i) {
    clamped += gate0.data<float>()[i] > 0.5f || std::fabs(up0.data<float>()[i]) > 0.5f;
    EXPECT_NEAR(o[i], j["out"][i].get<double>(), 1e-6) << i;
    EXPECT_NEAR(dg[i], j["dgate"][i].get<double>(), 1e-5 * (i + 1)) << i;
    EXPECT_NEAR(du[i], j["dup"][i].get<double>(), 1e-5 * (i + 1)) << i;
  }
  EXPECT_GT(clamped, 10);  // the clamps are exercised
  std::printf("swiglu_oai: %d of %lld pairs clamped; values and gradients match torch\n", clamped,
              static_cast<long long>(n));
  fs::remove_all(dir);
}

TEST(GptOss, FullSizeFlavorsCountThePublishedParameters) {
  // OpenAI's gpt-oss model card (2025, table 1): gpt-oss-120b 116.83B total, 5.13B active;
  // gpt-oss-20b 20.91B total, 3.61B active; the flavors are the openai/gpt-oss-{20b,120b}
  // config.json values (hidden 2880, 64 heads of 64, 8 KV heads, experts of width 2880,
  // 4 per token; 24 layers of 32 experts, 36 layers of 128). The card's active count
  // leaves out the input embedding (vocab 201088 x 2880) and keeps the unembedding.
  const TransformerConfig s = flavor("gpt_oss", "20b"), l = flavor("gpt_oss", "120b");
  s.validate();
  l.validate();
  const int64_t embed = 201088LL * 2880;
  EXPECT_EQ(s.num_params(), 20'914'757'184);
  EXPECT_EQ(l.num_params(), 116'829'156'672);
  EXPECT_EQ(std::llround((s.num_active_params() - embed) / 1e7), 361);
  EXPECT_EQ(std::llround((l.num_active_params() - embed) / 1e7), 513);
  EXPECT_EQ(std::llround(s.num_params() / 1e7), 2091);
  EXPECT_EQ(std::llround(l.num_params() / 1e7), 11683);
  std::printf("gpt_oss 20b: %lld total, %lld active; 120b: %lld total, %lld active (input embedding excluded)\n",
              static_cast<long long>(s.num_params()), static_cast<long long>(s.num_active_params() - embed),
              static_cast<long long>(l.num_params()), static_cast<long long>(l.num_active_params() - embed));
  flavor("gpt_oss", "debugmodel").validate();
}

TEST(GptOss, BadConfigsAreOneLineErrors) {
  auto expect_error = [](TransformerConfig c, const std::string& needle) {
    try {
      c.validate();
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(needle), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  };
  const TransformerConfig d = flavor("gpt_oss", "debugmodel");
  TransformerConfig c = d;
  c.expert_act = "gelu";
  expect_error(c, "expert_act 'gelu'");
  c = d;
  c.swiglu_limit = 0;
  expect_error(c, "swiglu_limit must be > 0");
  c = d;
  c.swiglu_limit = -7;
  expect_error(c, "swiglu_limit must be > 0");
  c = d;
  c.swiglu_alpha = 0;
  expect_error(c, "swiglu_alpha must be > 0");
  c = d;
  c.scoring_func = "topk";
  expect_error(c, "scoring_func must be softmax, sigmoid or softmax_topk");
  c = d;
  c.layer_types[1] = "local_attention";
  expect_error(c, "layer_types[1] = 'local_attention'");
  // config.json: the Switch aux loss (output_router_logits) is refused, not ignored.
  HFConfig hf = config_to_hf(d);
  hf.extra["output_router_logits"] = true;
  hf.extra["router_aux_loss_coef"] = 0.9;
  try {
    config_from_hf(hf);
    ADD_FAILURE() << "no error for output_router_logits";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("output_router_logits = true"), std::string::npos) << e.what();
  }
}

TEST(GptOss, DebugRecipeLossFalls) {
  char tmpl[] = "/tmp/titan_gpt_oss_train_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir(tmpl);
  const std::string cmd = "'" + test::titan_exe() + "' train --recipe gpt_oss_debugmodel --job.dump_folder='" + dir +
                          "' --checkpoint.enable=false --validation.enabled=false > '" + dir + "/log.txt' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<double> loss;
  std::ifstream f(dir + "/metrics.jsonl");
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("loss")) loss.push_back(j["loss"].get<double>());
  }
  ASSERT_GE(loss.size(), 20u);
  std::printf("gpt_oss_debugmodel: loss %.4f -> %.4f over %zu steps\n", loss.front(), loss.back(), loss.size());
  EXPECT_LT(loss.back(), loss.front() - 1.0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace titan::models
