// qwen3_moe family vs Hugging Face transformers (the PyPI venv,
// tests/reference/qwen3_moe_ref.py): a tiny random Qwen3MoeForCausalLM (6 experts, 2
// per token, layer 1 dense via mlp_only_layers) saved with save_pretrained (per-expert
// tensors) and loaded into titan. Logits within 1e-4 · max |logit|; per-token routed
// expert ids identical; router and expert gradients of the mean cross-entropy within
// 1e-4 relative; titan's export reloaded by transformers gives the same logits and
// routing. Also: the 30B-A3B sizing, bad configs as one-line errors, the debug recipe's
// loss falling and `titan generate` on its checkpoint.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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
#include "titan/config/resolve.h"
#include "titan/ops/loss.h"
#include "titan/train/trainer.h"

namespace titan::models {
namespace {

namespace fs = std::filesystem;

void run_py(const std::string& args) {
  const std::string cmd = "OMP_NUM_THREADS=1 '" + test::venv_python() + "' '" + std::string(TITAN_SOURCE_DIR) +
                          "/tests/reference/qwen3_moe_ref.py' " + args + " > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

using test::read_floats;

// max |a - b| / max |b|; max |a| when b is all zeros (an expert no token chose).
double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0, m = 0;
  for (size_t i = 0; i < b.size() && i < a.size(); ++i) {
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
    m = std::max(m, std::fabs(static_cast<double>(b[i])));
  }
  return m > 0 ? d / m : d;
}

nlohmann::json routing_json(const std::vector<Tensor>& routed) {
  nlohmann::json j = nlohmann::json::object();
  for (size_t l = 0; l < routed.size(); ++l) {
    if (!routed[l].defined()) continue;
    const int64_t T = routed[l].size(0), K = routed[l].size(1);
    std::vector<int32_t> v = routed[l].to_vector<int32_t>();
    nlohmann::json rows = nlohmann::json::array();
    for (int64_t t = 0; t < T; ++t) rows.push_back(std::vector<int32_t>(v.begin() + t * K, v.begin() + (t + 1) * K));
    j[std::to_string(l)] = rows;
  }
  return j;
}

TEST(Qwen3Moe, MatchesTransformersLogitsRoutingGradientsAndExport) {
  char tmpl[] = "/tmp/titan_qwen3moe_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const fs::path dir(tmpl);
  std::vector<int32_t> tokens, targets;
  for (int i = 0; i < 40; ++i) {
    tokens.push_back((i * 37 + 5) % 97);
    targets.push_back((i * 53 + 11) % 97);
  }
  std::ofstream(dir / "batch.json") << nlohmann::json{{"tokens", tokens}, {"targets", targets}}.dump();
  run_py("make '" + dir.string() + "'");

  const TransformerConfig cfg = config_from_hf(load_hf_config(dir.string()));
  EXPECT_EQ(cfg.family, "qwen3_moe");
  EXPECT_EQ(cfg.num_experts, 6);
  EXPECT_EQ(describe_layers(layer_specs(cfg)), "L0 gqa+moe, L1 gqa+dense, L2 gqa+moe");
  Decoder model(cfg);
  load_hf_state_dict(model, load_safetensors((dir / "model.safetensors").string()), dir.string());

  std::vector<Tensor> routed;
  ForwardBatch b = make_packed_batch({tokens});
  b.routed_experts = &routed;
  Tensor logits = model.logits(model.forward(b));
  const std::vector<float> got = logits.detach().to_vector<float>();
  const std::vector<float> want = read_floats(dir / "ref_logits.f32");
  ASSERT_EQ(got.size(), want.size());
  const double err = rel_err(got, want);
  EXPECT_LE(err, 1e-4) << "max |titan - HF| / max |HF logit|";
  nlohmann::json ref_routing = nlohmann::json::parse(std::ifstream(dir / "ref_routing.json"));
  EXPECT_EQ(routing_json(routed), ref_routing);

  Tensor loss = cross_entropy(logits, Tensor::from_vector(targets, {static_cast<int64_t>(targets.size())}));
  EXPECT_NEAR(loss.item<double>(), read_floats(dir / "ref_loss.f32").at(0), 1e-5);
  loss.backward();
  double worst = 0;
  for (int l : {0, 2}) {
    const std::string pre = "model.layers." + std::to_string(l) + ".mlp.";
    const std::string tp = "layers." + std::to_string(l) + ".moe.";
    const double eg = rel_err(model.parameter(tp + "router.gate.weight").grad().to_vector<float>(),
                              read_floats(dir / ("grad." + pre + "gate.weight.f32")));
    EXPECT_LE(eg, 1e-4) << "router gate gradient, layer " << l;
    worst = std::max(worst, eg);
    const char* hf[3] = {"gate_proj", "down_proj", "up_proj"};
    const char* ti[3] = {"w1", "w2", "w3"};
    for (int w = 0; w < 3; ++w) {
      Tensor g = model.parameter(tp + "experts." + ti[w]).grad();
      for (int64_t e = 0; e < cfg.num_experts; ++e) {
        const double ee = rel_err(g.select(0, e).contiguous().to_vector<float>(),
                                  read_floats(dir / ("grad." + pre + "experts." + std::to_string(e) + "." + hf[w] +
                                                     ".weight.f32")));
        EXPECT_LE(ee, 1e-4) << ti[w] << " gradient, layer " << l << " expert " << e;
        worst = std::max(worst, ee);
      }
    }
  }
  std::printf("qwen3_moe tiny: logits rel err %.3g, worst router/expert grad rel err %.3g\n", err, worst);

  // Export and reload in transformers.
  const fs::path ex = dir / "export";
  fs::create_directories(ex);
  save_hf_config((ex / "config.json").string(), config_to_hf(cfg));
  save_safetensors((ex / "model.safetensors").string(), hf_state_dict(model));
  run_py("check '" + dir.string() + "' '" + ex.string() + "'");
  EXPECT_LE(rel_err(got, read_floats(ex / "reload_logits.f32")), 1e-4) << "transformers on titan's export";
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(ex / "reload_routing.json")), ref_routing);
  // The export reloads into titan as well, with the same config.
  const TransformerConfig again = config_from_hf(load_hf_config(ex.string()));
  EXPECT_EQ(again.num_experts, cfg.num_experts);
  EXPECT_EQ(again.mlp_only_layers, cfg.mlp_only_layers);
  fs::remove_all(dir);
}

TEST(Qwen3Moe, FlavorsSizeThemselvesWithoutAllocating) {
  const TransformerConfig a3b = flavor("qwen3_moe", "qwen3_30b_a3b");
  // Qwen3-30B-A3B model card: 30.5B total, 3.3B activated (rounded down: 3.35B with
  // both embedding matrices, as num_active_params counts them).
  EXPECT_NEAR(a3b.num_params() / 1e9, 30.5, 0.05);
  EXPECT_GE(a3b.num_active_params() / 1e9, 3.3);
  EXPECT_LT(a3b.num_active_params() / 1e9, 3.4);
  const TransformerConfig a22b = flavor("qwen3_moe", "qwen3_235b_a22b");
  // Qwen3-235B-A22B model card: 235B total, 22B activated.
  EXPECT_NEAR(a22b.num_params() / 1e9, 235, 0.5);
  EXPECT_NEAR(a22b.num_active_params() / 1e9, 22, 0.5);
  std::printf("qwen3_30b_a3b %.3fB / %.3fB active; qwen3_235b_a22b %.2fB / %.2fB active\n", a3b.num_params() / 1e9,
              a3b.num_active_params() / 1e9, a22b.num_params() / 1e9, a22b.num_active_params() / 1e9);
}

TEST(Qwen3Moe, BadHfConfigsAreOneLineErrorsNamingTheField) {
  auto base = [] {
    return nlohmann::json{{"architectures", {"Qwen3MoeForCausalLM"}}, {"model_type", "qwen3_moe"},
                          {"vocab_size", 97}, {"hidden_size", 48}, {"intermediate_size", 80},
                          {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                          {"head_dim", 16}, {"num_experts", 6}, {"num_experts_per_tok", 2},
                          {"moe_intermediate_size", 24}, {"norm_topk_prob", true}};
  };
  auto expect_error = [](const nlohmann::json& j, const std::string& needle) {
    test::expect_one_line_error([&] { config_from_hf(parse_hf_config(j, "test")); }, needle);
  };
  EXPECT_NO_THROW(config_from_hf(parse_hf_config(base(), "test")));
  nlohmann::json j = base();
  j["num_experts_per_tok"] = 7;
  expect_error(j, "num_experts_per_tok (7)");
  j = base();
  j.erase("moe_intermediate_size");
  expect_error(j, "'moe_intermediate_size'");
  j = base();
  j["norm_topk_prob"] = 3;
  expect_error(j, "'norm_topk_prob'");
  j = base();
  j["architectures"] = {"Qwen9MoeForCausalLM"};
  expect_error(j, "Qwen9MoeForCausalLM");
  // transformers 5.x spells num_experts as num_local_experts.
  j = base();
  j.erase("num_experts");
  j["num_local_experts"] = 4;
  EXPECT_EQ(config_from_hf(parse_hf_config(j, "test")).num_experts, 4);
  // Qwen3-Next's MoE layers (shared expert with a sigmoid gate) are refused, not
  // built without their shared expert.
  j = base();
  j["architectures"] = {"Qwen3NextForCausalLM"};
  j["model_type"] = "qwen3_next";
  expect_error(j, "Qwen3NextForCausalLM layer 0 is a mixture-of-experts layer");
  // From the command line: exit code 2, one line naming the field.
  {
    char tmpl[] = "/tmp/titan_qwen3moe_bad_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    j = base();
    j["num_experts_per_tok"] = 9;
    std::ofstream(std::string(tmpl) + "/config.json") << j.dump();
    const std::string cmd = "'" + test::titan_exe() + "' generate --hf '" + tmpl + "' --prompt hi > '" + tmpl +
                            "/out.txt' 2> '" + tmpl + "/err.txt'";
    const int st = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(st)) << cmd;
    EXPECT_EQ(WEXITSTATUS(st), 2) << cmd;
    std::ifstream ef(std::string(tmpl) + "/err.txt");
    const std::string err((std::istreambuf_iterator<char>(ef)), std::istreambuf_iterator<char>());
    EXPECT_NE(err.find("num_experts_per_tok (9)"), std::string::npos) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    fs::remove_all(tmpl);
  }
  // The sigmoid router's group limits (DeepSeek-V3 fields, validated for every family).
  TransformerConfig c = flavor("qwen3_moe", "debugmodel");
  c.scoring_func = "sigmoid";
  c.n_group = 3;
  try {
    c.validate();
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_routed_experts (8) must be divisible by n_group (3)"), std::string::npos);
  }
  c.n_group = 4;
  c.topk_group = 5;
  try {
    c.validate();
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("topk_group (5) must be <= n_group (4)"), std::string::npos);
  }
}

// `titan train --recipe qwen3_moe_debugmodel` on the shipped text: the loss falls, the
// MoE metrics are logged, and `titan generate` on its checkpoint (the paged-cache
// generator) continues a prompt greedily exactly as the trainer-side model does.
TEST(Qwen3Moe, DebugRecipeTrainsAndGenerates) {
  const fs::path dump = fs::path(::testing::TempDir()) / ("titan_qwen3moe_train_" + std::to_string(getpid()));
  fs::remove_all(dump);
  config::JobConfig job = config::resolve_config(
      "qwen3_moe_debugmodel", std::nullopt,
      {"--checkpoint.enable=true", "--validation.enabled=false", "--job.dump_folder=" + dump.string(),
       "--model.hf_config=" + std::string(TITAN_SOURCE_DIR) + "/recipes/qwen3_moe_debugmodel.json"});
  train::Trainer trainer(job);
  trainer.train();
  std::vector<double> loss;
  bool saw_metrics = false;
  std::ifstream f(dump / "metrics.jsonl");
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("loss")) continue;
    loss.push_back(j["loss"].get<double>());
    if (j.contains("moe_max_load") && j.contains("moe_router_entropy")) {
      saw_metrics = true;
      EXPECT_GE(j["moe_max_load"].get<double>(), 1.0);
      EXPECT_GT(j["moe_router_entropy"].get<double>(), 0.0);
      EXPECT_LE(j["moe_router_entropy"].get<double>(), std::log(8.0) + 1e-9);
    }
  }
  ASSERT_GE(loss.size(), 20u);
  EXPECT_TRUE(saw_metrics);
  std::printf("qwen3_moe_debugmodel: loss %.4f -> %.4f over %zu steps\n", loss.front(), loss.back(), loss.size());
  EXPECT_LT(loss.back(), loss.front() - 1.0);  // bytes: ~ln 256 = 5.5 at init

  const std::string prompt = "ROMEO:";
  const std::string expected = trainer.sample(prompt, 24, 0.0, 0);
  const std::string cmd = "'" + test::titan_exe() + "' generate --checkpoint '" + (dump / "checkpoint").string() +
                          "' --prompt '" + prompt + "' --temperature 0 --max-tokens 24 --ignore-eos 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int st = pclose(p);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << cmd << "\n" << out;
  EXPECT_EQ(out, prompt + expected + "\n");
  fs::remove_all(dump);
}

}  // namespace
}  // namespace titan::models
