// qwen3_5 family vs Hugging Face transformers (the PyPI venv): a tiny random
// Qwen3_5ForCausalLM (Gated DeltaNet with split in_proj_qkv / z / b / a, gated full
// attention, partial rotary with text-only mrope, gain-centred norms, dense MLPs) saved
// with save_pretrained and loaded into titan; logits of two packed sequences (one
// crossing the 64-token chunk boundary) within 1e-4 · max |logit|; titan's export
// reloaded by transformers. The full-size flavor's parameter count equals transformers'
// count of Qwen3_5TextConfig's defaults. Bad configs are one-line errors. The debug
// recipe's loss falls and `titan generate` decodes its checkpoint.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/models/oracle_util.h"
#include "tests/util/expect_error.h"
#include "tests/util/test_files.h"
#include "tests/util/titan_exe.h"
#include "tests/util/venv_python.h"
#include "titan/autograd/node.h"
#include "titan/checkpoint/hf_config.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/models/common/decoder.h"
#include "titan/models/family.h"

namespace titan::models {
namespace {

namespace fs = std::filesystem;

std::string py_cmd(const std::string& args) {
  return "OMP_NUM_THREADS=1 '" + test::venv_python() + "' '" + std::string(TITAN_SOURCE_DIR) +
         "/tests/reference/qwen3_5_ref.py' " + args;
}

TEST(Qwen3_5, LogitsMatchTransformersAndExportReloads) {
  const fs::path dir = test::fresh_dir("qwen3_5");
  const auto seqs = test::oracle_sequences();
  std::ofstream(dir / "tokens.json") << nlohmann::json(seqs).dump();
  ASSERT_EQ(std::system(py_cmd("make '" + dir.string() + "'").c_str()), 0);
  const TransformerConfig cfg = config_from_hf(load_hf_config(dir.string()));
  EXPECT_EQ(cfg.family, "qwen3_5");
  EXPECT_EQ(describe_layers(layer_specs(cfg)), "L0-2 gdn+dense, L3 gqa+dense");
  Decoder model(cfg);
  load_hf_state_dict(model, load_safetensors((dir / "model.safetensors").string()), dir.string());
  autograd::NoGradGuard ng;
  const std::vector<float> got = model.logits(model.forward(make_packed_batch(seqs))).to_vector<float>();
  const std::vector<float> want = test::read_floats(dir / "logits.bin");
  ASSERT_EQ(got.size(), want.size());
  const double err = test::max_rel_err(got, want);
  EXPECT_LE(err, 1e-4) << "max |titan - HF| / max |HF logit|";
  std::printf("qwen3_5 tiny: max |titan - HF| / max |logit| = %.3g\n", err);

  // Export: config.json (model_type qwen3_5_text) + the split projections, reloaded in transformers.
  const fs::path ex = dir / "export";
  fs::create_directories(ex);
  const HFConfig hf = config_to_hf(cfg);
  EXPECT_EQ(hf.model_type, "qwen3_5_text");
  EXPECT_FALSE(hf.extra.contains("num_experts"));
  save_hf_config((ex / "config.json").string(), hf);
  const auto sd = hf_state_dict(model);
  EXPECT_TRUE(sd.count("model.layers.0.linear_attn.in_proj_qkv.weight"));
  EXPECT_FALSE(sd.count("model.layers.0.linear_attn.in_proj_qkvz.weight"));
  save_safetensors((ex / "model.safetensors").string(), sd);
  fs::copy_file(dir / "tokens.json", ex / "tokens.json");
  ASSERT_EQ(std::system(py_cmd("logits '" + ex.string() + "'").c_str()), 0);
  EXPECT_LE(test::max_rel_err(got, test::read_floats(ex / "logits.bin")), 1e-4) << "transformers on titan's export";
  fs::remove_all(dir);
}

TEST(Qwen3_5, FullSizeFlavorCountEqualsTransformers) {
  FILE* p = popen(py_cmd("count 2>/dev/null").c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[256] = {0};
  ASSERT_NE(fgets(buf, sizeof buf, p), nullptr);
  ASSERT_EQ(pclose(p), 0);
  const int64_t hf_total = nlohmann::json::parse(buf).at("total").get<int64_t>();
  EXPECT_EQ(flavor("qwen3_5", "qwen3_5_text_default").num_params(), hf_total);
}

TEST(Qwen3_5, BadConfigsAreOneLineErrorsNamingTheField) {
  const fs::path dir = test::fresh_dir("qwen3_5_bad");
  auto parse = [&](const nlohmann::json& j) {
    std::ofstream(dir / "config.json") << j.dump();
    return [d = dir.string()] { config_from_hf(load_hf_config(d)); };
  };
  nlohmann::json j = nlohmann::json::parse(std::ifstream(std::string(TITAN_SOURCE_DIR) + "/recipes/qwen3_5_debugmodel.json"));
  nlohmann::json wrapper = {{"architectures", {"Qwen3_5ForConditionalGeneration"}}, {"model_type", "qwen3_5"},
                            {"text_config", j}};
  test::expect_one_line_error(parse(wrapper), "text_config");
  nlohmann::json moe = j;
  moe["num_experts"] = 8;
  test::expect_one_line_error(parse(moe), "num_experts = 8");
  nlohmann::json lt = j;
  lt["layer_types"][1] = "mamba";
  test::expect_one_line_error(parse(lt), "layer_types[1] = 'mamba'");
  nlohmann::json no_arch = j;
  no_arch.erase("architectures");
  std::ofstream(dir / "config.json") << no_arch.dump();
  EXPECT_EQ(config_from_hf(load_hf_config(dir.string())).family, "qwen3_5");  // from model_type qwen3_5_text
  fs::remove_all(dir);
}

TEST(Qwen3_5, DebugRecipeLossFallsAndGenerates) {
  const std::string dir = test::fresh_dir("qwen3_5_train");
  const std::string cmd = "'" + test::titan_exe() + "' train --recipe qwen3_5_debugmodel --job.dump_folder='" + dir +
                          "' --checkpoint.enable=true --checkpoint.interval=30 --validation.enabled=false > '" + dir +
                          "/log.txt' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<double> loss;
  for (const nlohmann::json& r : test::read_metrics(dir))
    if (r.contains("loss")) loss.push_back(r["loss"].get<double>());
  ASSERT_GE(loss.size(), 20u);
  std::printf("qwen3_5_debugmodel: loss %.4f -> %.4f over %zu steps\n", loss.front(), loss.back(), loss.size());
  EXPECT_LT(loss.back(), loss.front() - 1.0);  // bytes: ~ln 256 = 5.5 at init
  const std::string gen = "'" + test::titan_exe() + "' generate --checkpoint '" + dir +
                          "/checkpoint' --prompt 'ROMEO:' --max-tokens 80 --temperature 0 --ignore-eos > '" + dir +
                          "/gen.txt' 2> '" + dir + "/gen_err.txt'";
  ASSERT_EQ(std::system(gen.c_str()), 0) << gen;
  std::ifstream g(dir + "/gen.txt");
  const std::string text((std::istreambuf_iterator<char>(g)), std::istreambuf_iterator<char>());
  EXPECT_GE(text.size(), 40u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace titan::models
