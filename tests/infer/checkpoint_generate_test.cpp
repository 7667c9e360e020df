// `titan generate` loads saved models exactly:
//   --checkpoint: train the debugmodel recipe for 2 steps with checkpoints on; the
//     greedy completion of the generate program (engine, paged KV cache) must equal
//     the trainer's own greedy sample (Trainer::sample: full recompute on the packed
//     path, argmax) for the same weights;
//   --hf: a random qwen3-style model saved as config.json + model.safetensors with the
//     Qwen3 tokenizer.json; the program's JSONL token ids and logprob bits must equal
//     an in-process engine on the original model.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "titan/checkpoint/hf_config.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/config/resolve.h"
#include "titan/core/fs.h"
#include "titan/data/tokenizer.h"
#include "titan/infer/engine.h"
#include "titan/models/family.h"
#include "titan/train/trainer.h"
#include "tests/util/titan_exe.h"

using namespace titan;

namespace {

namespace fs = std::filesystem;

using titan::test::titan_exe;

std::string run_generate(const std::string& args) {
  const std::string cmd = "'" + titan_exe() + "' generate " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr);
  std::string out;
  std::array<char, 4096> buf;
  for (size_t n; p && (n = fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), n);
  const int st = p ? pclose(p) : -1;
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << cmd << "\n" << out;
  return out;
}

TEST(GenerateHF, ProgramEqualsInProcessEngine) {
  const std::string tok_path = config::shared_data_dir() + "/qwen3-tokenizer/tokenizer.json";
  if (!file_exists(tok_path)) GTEST_SKIP() << "no " << tok_path;
  auto tok = data::load_tokenizer(tok_path);
  models::TransformerConfig cfg;
  cfg.family = "qwen3";
  cfg.vocab_size = 151936;
  cfg.hidden_size = 32;
  cfg.intermediate_size = 48;
  cfg.num_hidden_layers = 2;
  cfg.num_attention_heads = 4;
  cfg.num_key_value_heads = 2;
  cfg.head_dim = 16;
  cfg.qk_norm = true;
  cfg.tie_word_embeddings = true;
  cfg.max_position_embeddings = 128;
  cfg.rope_theta = 1e6;
  cfg.rms_norm_eps = 1e-6;
  models::Decoder model(cfg);
  model.init_weights(11);
  const fs::path dir = fs::path(::testing::TempDir()) / ("titan_gen_hf_" + std::to_string(getpid()));
  fs::create_directories(dir);
  save_safetensors((dir / "model.safetensors").string(), models::hf_state_dict(model), {});
  save_hf_config((dir / "config.json").string(), models::config_to_hf(cfg));
  fs::copy_file(tok_path, dir / "tokenizer.json");
  {
    std::ofstream in(dir / "in.jsonl");
    in << R"({"prompt": "Hello, world", "temperature": 0, "max_tokens": 6})" << "\n"
       << R"({"prompt": "The quick brown fox", "temperature": 0.9, "seed": 5, "max_tokens": 6, "n": 2})" << "\n";
  }
  run_generate("--hf '" + dir.string() + "' --ignore-eos --input '" + (dir / "in.jsonl").string() + "' --output '" +
               (dir / "out.jsonl").string() + "'");
  std::vector<nlohmann::json> lines;
  std::ifstream res(dir / "out.jsonl");
  for (std::string l; std::getline(res, l);) lines.push_back(nlohmann::json::parse(l));
  ASSERT_EQ(lines.size(), 3u);

  infer::Engine e(model, tok.get(), infer::EngineConfig{});
  infer::SamplingParams a, b;
  a.temperature = 0;
  a.max_tokens = 6;
  a.ignore_eos = true;
  b.temperature = 0.9;
  b.seed = 5;
  b.max_tokens = 6;
  b.n = 2;
  b.ignore_eos = true;
  auto outs = e.generate({tok->encode("Hello, world"), tok->encode("The quick brown fox")}, {a, b});
  const std::vector<const infer::CompletionOutput*> want = {&outs[0].outputs[0], &outs[1].outputs[0],
                                                            &outs[1].outputs[1]};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(lines[i]["token_ids"].get<std::vector<int32_t>>(), want[i]->token_ids) << i;
    EXPECT_EQ(lines[i]["completion"].get<std::string>(), want[i]->text) << i;
    const auto lp = lines[i]["logprobs"].get<std::vector<float>>();  // JSON keeps float bits (shortest round trip)
    ASSERT_EQ(lp.size(), want[i]->logprobs.size());
    EXPECT_EQ(std::memcmp(lp.data(), want[i]->logprobs.data(), lp.size() * 4), 0) << i;
  }
  fs::remove_all(dir);
}

TEST(GenerateCheckpoint, GreedyEqualsTrainerSample) {
  const fs::path dump = fs::path(::testing::TempDir()) / ("titan_gen_ckpt_" + std::to_string(getpid()));
  fs::remove_all(dump);
  config::JobConfig job = config::resolve_config(
      "debugmodel", std::nullopt,
      {"--training.steps=2", "--checkpoint.enable=true", "--checkpoint.interval=2", "--validation.enabled=false",
       "--lr_scheduler.warmup_steps=1", "--job.dump_folder=" + dump.string()});
  train::Trainer trainer(job);
  trainer.train();
  const std::string prompt = "ROMEO:";
  const std::string expected = trainer.sample(prompt, 24, 0.0, 0);

  const std::string cmd = "'" + titan_exe() + "' generate --checkpoint '" + (dump / "checkpoint").string() +
                          "' --prompt '" + prompt + "' --temperature 0 --max-tokens 24 --ignore-eos 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  std::array<char, 4096> buf;
  for (size_t n; (n = fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), n);
  const int st = pclose(p);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << cmd << "\n" << out;
  EXPECT_EQ(out, prompt + expected + "\n");
  fs::remove_all(dump);
}

}  // namespace
