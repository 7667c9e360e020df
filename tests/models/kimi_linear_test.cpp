// kimi_linear family: Kimi Delta Attention (per-channel decay) layers interleaved 3:1 with
// GQA layers.
//   - The KDA mixer against transformers' KimiLinearDeltaAttention (the PyPI venv's torch
//     paths: causal_conv1d_fn, chunk_kimi_delta_attention), every parameter random, 70
//     tokens (crossing the 64-token chunk): output within 1e-4 · max |out|.
//   - config.json: titan's GQA form ("kv_lora_rank": null) reads and writes back; HF's MLA
//     form is a one-line refusal.
//   - `titan train --recipe kimi_linear_debugmodel`: loss falls; `titan generate` on its
//     checkpoint runs (prefill == decode is in tests/infer/hybrid_parity_test.cpp).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
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
#include "titan/models/mixers/kda.h"

namespace titan::models {
namespace {

namespace fs = std::filesystem;

using test::read_floats;

TEST(KimiLinear, KdaLayerMatchesTransformers) {
  char tmpl[] = "/tmp/titan_kda_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const fs::path dir(tmpl);
  const std::string cmd = "OMP_NUM_THREADS=1 '" + test::venv_python() + "' '" + TITAN_SOURCE_DIR +
                          "/tests/reference/kimi_linear_ref.py' kda '" + dir.string() + "' 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  TransformerConfig c = flavor("kimi_linear", "debugmodel");
  c.hidden_size = 48;
  c.linear_num_key_heads = c.linear_num_value_heads = 2;
  c.linear_key_head_dim = c.linear_value_head_dim = 16;
  c.linear_conv_kernel_dim = 4;
  c.rms_norm_eps = 1e-5;
  KimiDeltaAttention kda(c, 0);
  const auto hf = load_safetensors((dir / "layer.safetensors").string());
  {
    autograd::NoGradGuard ng;
    for (auto& [name, p] : kda.named_parameters()) {
      std::string hn = name;
      for (auto [t, h] : {std::pair{"wq.", "q_proj."}, {"wk.", "k_proj."}, {"wv.", "v_proj."}, {"wo.", "o_proj."}})
        if (hn.rfind(t, 0) == 0) hn = h + hn.substr(std::string(t).size());
      auto it = hf.find(hn);
      ASSERT_NE(it, hf.end()) << hn;
      ASSERT_EQ(it->second.shape(), p.shape()) << hn;
      Tensor dst = p;
      dst.copy_(it->second);
    }
  }
  const int64_t T = 70, D = 48;
  const std::vector<float> x = read_floats(dir / "x.bin"), want = read_floats(dir / "out.bin");
  ASSERT_EQ(static_cast<int64_t>(x.size()), T * D);
  ForwardBatch b = make_packed_batch({std::vector<int32_t>(T, 0)});
  autograd::NoGradGuard ng;
  const std::vector<float> got = kda.forward(Tensor::from_vector(x, {T, D}), b, nullptr).to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  double d = 0, m = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    d = std::max(d, std::fabs(static_cast<double>(got[i]) - want[i]));
    m = std::max(m, std::fabs(static_cast<double>(want[i])));
  }
  std::printf("KDA layer: max |titan - HF| / max |HF| = %.3g (max |HF| = %.3g)\n", d / m, m);
  EXPECT_LE(d / m, 1e-4);
  fs::remove_all(dir);
}

TEST(KimiLinear, ConfigReadsWritesAndRefusesMla) {
  const TransformerConfig c = config_from_hf(load_hf_config(std::string(TITAN_SOURCE_DIR) +
                                                             "/recipes/kimi_linear_debugmodel.json"));
  EXPECT_EQ(c.family, "kimi_linear");
  EXPECT_EQ(c.linear_attn_type, "kda");
  EXPECT_EQ(describe_layers(layer_specs(c)), "L0-2 kda+dense, L3 gqa+dense");
  EXPECT_EQ(c.linear_num_value_heads, 4);
  EXPECT_EQ(c.linear_key_head_dim, 16);
  const TransformerConfig back = config_from_hf(parse_hf_config(hf_config_to_json(config_to_hf(c)), "export"));
  EXPECT_EQ(back.layer_types, c.layer_types);
  EXPECT_EQ(back.linear_attn_type, "kda");
  EXPECT_EQ(back.linear_num_value_heads, 4);
  EXPECT_EQ(back.num_params(), c.num_params());
  Decoder m(c);
  EXPECT_EQ(m.num_parameters(), c.num_params());
  nlohmann::json by_type = hf_config_to_json(config_to_hf(c));
  by_type.erase("architectures");  // model_type alone names the family
  EXPECT_EQ(config_from_hf(parse_hf_config(by_type, "by_type.json")).family, "kimi_linear");
  nlohmann::json j = hf_config_to_json(config_to_hf(c));
  j["kv_lora_rank"] = 512;
  try {
    parse_hf_config(j, "mla.json");
    ADD_FAILURE() << "MLA kimi_linear accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("MLA full attention (kv_lora_rank = 512) is not supported"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos);
  }
  j.erase("kv_lora_rank");  // HF's default is MLA
  EXPECT_THROW(parse_hf_config(j, "default.json"), Error);
  TransformerConfig bad = c;
  bad.linear_num_key_heads = 2;
  EXPECT_THROW(bad.validate(), Error);
  bad = c;
  bad.linear_attn_type = "mamba2";
  EXPECT_THROW(bad.validate(), Error);
}

TEST(KimiLinear, DebugRecipeLossFallsAndGenerates) {
  char tmpl[] = "/tmp/titan_kimi_train_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir(tmpl);
  const std::string cmd = "cd '" + std::string(TITAN_SOURCE_DIR) + "' && '" + test::titan_exe() +
                          "' train --recipe kimi_linear_debugmodel --job.dump_folder='" + dir +
                          "' --checkpoint.enable=true --checkpoint.interval=30 --validation.enabled=false > '" + dir + "/log.txt' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<double> loss;
  std::ifstream f(dir + "/metrics.jsonl");
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("loss")) loss.push_back(j["loss"].get<double>());
  }
  ASSERT_GE(loss.size(), 20u);
  std::printf("kimi_linear_debugmodel: loss %.4f -> %.4f over %zu steps\n", loss.front(), loss.back(), loss.size());
  EXPECT_LT(loss.back(), loss.front() - 1.0);
  // The trained checkpoint generates (greedy, 80 tokens: the KDA state slots through a
  // chunk boundary).
  const std::string gen = "'" + test::titan_exe() + "' generate --checkpoint '" + dir +
                          "/checkpoint' --prompt 'ROMEO:' --max-tokens 80 --temperature 0 --ignore-eos > '" + dir +
                          "/gen.txt' 2> '" + dir + "/gen_err.txt'";
  ASSERT_EQ(std::system(gen.c_str()), 0) << gen;
  std::ifstream g(dir + "/gen.txt");
  const std::string text((std::istreambuf_iterator<char>(g)), std::istreambuf_iterator<char>());
  std::printf("kimi_linear_debugmodel generates: %s\n", text.c_str());
  EXPECT_GE(text.size(), 40u);
  fs::remove_all(dir);
}

TEST(KimiLinear, FullSizeFlavorSizesItself) {
  const TransformerConfig big = flavor("kimi_linear", "kimi_linear_48b_a3b");
  EXPECT_EQ(describe_layers(layer_specs(big)).substr(0, 33), "L0 kda+dense, L1-3 kda+moe, L4 gq");
  // Kimi-Linear-48B-A3B: "48B total, 3B activated" (model card); GQA stands in for MLA in
  // 6 of 27 layers (a few hundred million parameters either way).
  std::printf("kimi_linear_48b_a3b: %.2f B parameters, %.2f B active\n", big.num_params() / 1e9,
              big.num_active_params() / 1e9);
  EXPECT_GT(big.num_params(), 46'000'000'000);
  EXPECT_LT(big.num_params(), 50'000'000'000);
  EXPECT_GT(big.num_active_params(), 2'500'000'000);
  EXPECT_LT(big.num_active_params(), 3'700'000'000);
}

}  // namespace
}  // namespace titan::models
