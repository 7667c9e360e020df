// qwen3_next family vs Hugging Face transformers (the PyPI venv): a tiny random
// Qwen3NextForCausalLM (Gated DeltaNet + gated full attention, partial rotary,
// gain-centred norms) saved with save_pretrained and loaded into titan; logits of two
// packed sequences (one crossing the 64-token chunk boundary) within 1e-4 · max |logit|;
// then titan's export reloaded by transformers. Bad hybrid configs are one-line errors.
// The debug recipe's loss falls and `titan generate` runs on its checkpoint.
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

namespace titan::models {
namespace {

namespace fs = std::filesystem;

std::string ref_script() { return std::string(TITAN_SOURCE_DIR) + "/tests/reference/qwen3_next_ref.py"; }

void run_py(const std::string& args) {
  const std::string cmd = "OMP_NUM_THREADS=1 '" + test::venv_python() + "' '" + ref_script() + "' " + args;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

using test::read_floats;

std::vector<std::vector<int32_t>> sequences() { return test::oracle_sequences(); }

using test::max_rel_err;

TEST(Qwen3Next, LogitsMatchTransformersAndExportReloads) {
  char tmpl[] = "/tmp/titan_qwen3next_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const fs::path dir(tmpl);
  const auto seqs = sequences();
  std::ofstream(dir / "tokens.json") << nlohmann::json(seqs).dump();
  run_py("make '" + dir.string() + "'");
  const TransformerConfig cfg = config_from_hf(load_hf_config(dir.string()));
  EXPECT_EQ(cfg.family, "qwen3_next");
  EXPECT_EQ(describe_layers(layer_specs(cfg)), "L0-2 gdn+dense, L3 gqa+dense");
  Decoder model(cfg);
  load_hf_state_dict(model, load_safetensors((dir / "model.safetensors").string()), dir.string());
  autograd::NoGradGuard ng;
  const ForwardBatch b = make_packed_batch(seqs);
  const std::vector<float> got = model.logits(model.forward(b)).to_vector<float>();
  const std::vector<float> want = read_floats(dir / "logits.bin");
  ASSERT_EQ(got.size(), want.size());
  const double err = max_rel_err(got, want);
  EXPECT_LE(err, 1e-4) << "max |titan - HF| / max |HF logit|";
  std::printf("qwen3_next tiny: max |titan - HF| / max |logit| = %.3g\n", err);

  // Export (config.json + safetensors) and reload in transformers.
  const fs::path ex = dir / "export";
  fs::create_directories(ex);
  save_hf_config((ex / "config.json").string(), config_to_hf(cfg));
  save_safetensors((ex / "model.safetensors").string(), hf_state_dict(model));
  fs::copy_file(dir / "tokens.json", ex / "tokens.json");
  run_py("logits '" + ex.string() + "'");
  const double err2 = max_rel_err(got, read_floats(ex / "logits.bin"));
  EXPECT_LE(err2, 1e-4) << "transformers on titan's export";
  fs::remove_all(dir);
}

TEST(Qwen3Next, BadHybridConfigsAreOneLineErrors) {
  auto expect_error = [](const TransformerConfig& c, const std::string& needle) {
    test::expect_one_line_error([&] { c.validate(); }, needle);
  };
  const TransformerConfig d = flavor("qwen3_next", "debugmodel");
  TransformerConfig c = d;
  c.layer_types.pop_back();
  expect_error(c, "layer_types has 7 entries");
  c = d;
  c.layer_types[2] = "mamba";
  expect_error(c, "layer_types[2] = 'mamba'");
  c = d;
  c.linear_conv_kernel_dim = 0;
  expect_error(c, "linear_conv_kernel_dim");
  c = d;
  c.linear_key_head_dim = 2048;
  expect_error(c, "linear_key_head_dim = 2048");
  c = d;
  c.linear_num_value_heads = 3;
  expect_error(c, "linear_num_value_heads (3)");
}

TEST(Qwen3Next, DebugRecipeLossFalls) {
  char tmpl[] = "/tmp/titan_qwen3next_train_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir(tmpl);
  const std::string cmd = "'" + test::titan_exe() + "' train --recipe qwen3_next_debugmodel --job.dump_folder='" +
                          dir + "' --checkpoint.enable=true --checkpoint.interval=30 --validation.enabled=false > '" + dir +
                          "/log.txt' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<double> loss;
  std::ifstream f(dir + "/metrics.jsonl");
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("loss")) loss.push_back(j["loss"].get<double>());
  }
  ASSERT_GE(loss.size(), 20u);
  const double first = loss.front(), last = loss.back();
  std::printf("qwen3_next_debugmodel: loss %.4f -> %.4f over %zu steps\n", first, last, loss.size());
  EXPECT_LT(last, first - 1.0);  // bytes: ~ln 256 = 5.5 at init
  // `titan generate` on the checkpoint: the GDN layers decode from their state slots
  // (80 greedy tokens cross KV blocks and a 64-token chunk).
  const std::string gen = "'" + test::titan_exe() + "' generate --checkpoint '" + dir +
                          "/checkpoint' --prompt 'ROMEO:' --max-tokens 80 --temperature 0 --ignore-eos > '" + dir +
                          "/gen.txt' 2> '" + dir + "/gen_err.txt'";
  ASSERT_EQ(std::system(gen.c_str()), 0) << gen;
  std::ifstream g(dir + "/gen.txt");
  const std::string text((std::istreambuf_iterator<char>(g)), std::istreambuf_iterator<char>());
  std::printf("qwen3_next_debugmodel generates: %s\n", text.c_str());
  EXPECT_GE(text.size(), 40u);
  fs::remove_all(dir);
}

TEST(Qwen3Next, FullSizeFlavorSizesItself) {
  const TransformerConfig big = flavor("qwen3_next", "qwen3_next_80b_a3b");
  // Qwen3-Next-80B-A3B: "80B total, 3B activated" (model card); HF's exact count minus
  // the 48 shared-expert gates (D = 2048 each), which titan's MoE count does not model.
  EXPECT_GT(big.num_params(), 79'000'000'000);
  EXPECT_LT(big.num_params(), 81'000'000'000);
  EXPECT_GT(big.num_active_params(), 2'500'000'000);
  EXPECT_LT(big.num_active_params(), 4'000'000'000);
}

}  // namespace
}  // namespace titan::models
