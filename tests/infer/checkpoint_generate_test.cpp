// `titan generate` loads saved models exactly:
//   --checkpoint: train the debugmodel recipe for 2 steps with checkpoints on; the
//     greedy completion of the generate program (engine, paged KV cache) must equal
//     the trainer's own greedy sample (Trainer::sample: full recompute on the packed
//     path, argmax) for the same weights;
//   --hf: a random qwen3-style model saved as config.json + model.safetensors with the
//     Qwen3 tokenizer.json; the program's JSONL token ids and logprob bits must equal
//     an in-process engine on the original model;
//   component overrides: a run trained with --model.overrides=swiglu=composed records
//     them in config.toml and in its HF export's config.json; generate --checkpoint and
//     --hf apply them (their JSONL logprob bits are an in-process engine's on the
//     trainer's model, which runs the override, and they report the forwards through
//     the composed path); attention=reference, which the generator does not run, is
//     refused with exit 2 naming it by generate, serve and rl.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "titan/checkpoint/hf_config.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/config/resolve.h"
#include "titan/core/fs.h"
#include "titan/data/tokenizer.h"
#include "titan/infer/engine.h"
#include "titan/models/common/overrides.h"
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

std::vector<std::vector<float>> jsonl_logprobs(const fs::path& path) {
  std::vector<std::vector<float>> out;
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);) out.push_back(nlohmann::json::parse(l)["logprobs"].get<std::vector<float>>());
  return out;
}

bool same_float_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// (exit code, output) of a titan command line.
std::pair<int, std::string> run_titan(const std::string& args) {
  const std::string cmd = "TITAN_NUM_THREADS=1 '" + titan_exe() + "' " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  for (size_t n; p && (n = fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), n);
  const int st = p ? pclose(p) : -1;
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

TEST(GenerateOverrides, CheckpointAndExportApplyTheRecordedOverrides) {
  const fs::path dump = fs::path(::testing::TempDir()) / ("titan_gen_ovr_" + std::to_string(getpid()));
  fs::remove_all(dump);
  config::JobConfig job = config::resolve_config(
      "debugmodel", std::nullopt,
      {"--training.steps=2", "--checkpoint.enable=true", "--checkpoint.interval=2", "--validation.enabled=false",
       "--lr_scheduler.warmup_steps=1", "--checkpoint.export_hf=true", "--model.overrides=swiglu=composed",
       "--job.dump_folder=" + dump.string()});
  train::Trainer trainer(job);
  trainer.train();
  const nlohmann::json hf = nlohmann::json::parse(read_file((dump / "hf" / "config.json").string()));
  EXPECT_EQ(hf.value(models::kHfOverridesKey, nlohmann::json()), nlohmann::json({"swiglu=composed:*"}));
  const std::string prompt = "ROMEO:";
  {
    std::ofstream in(dump / "in.jsonl");
    in << R"({"prompt": "ROMEO:", "temperature": 0.9, "seed": 5, "max_tokens": 16})" << "\n";
  }
  const std::string io = " --ignore-eos --input '" + (dump / "in.jsonl").string() + "' --output '";
  const std::string ck_out = run_generate("--checkpoint '" + (dump / "checkpoint").string() + "'" + io +
                                          (dump / "ck.jsonl").string() + "'");
  EXPECT_NE(ck_out.find("model.overrides swiglu=composed:*"), std::string::npos) << ck_out;
  const std::string hf_out =
      run_generate("--hf '" + (dump / "hf").string() + "'" + io + (dump / "hf.jsonl").string() + "'");
  EXPECT_NE(hf_out.find("model.overrides swiglu=composed:*"), std::string::npos) << hf_out;
  const auto ck = jsonl_logprobs(dump / "ck.jsonl"), from_hf = jsonl_logprobs(dump / "hf.jsonl");
  ASSERT_EQ(ck.size(), 1u);
  ASSERT_EQ(from_hf.size(), 1u);

  auto tok = data::load_tokenizer("byte");  // the debugmodel recipe's byte-level tokenizer
  infer::SamplingParams sp;
  sp.temperature = 0.9;
  sp.seed = 5;
  sp.max_tokens = 16;
  sp.ignore_eos = true;
  const auto engine_logprobs = [&](std::vector<int32_t> ids) {
    infer::Engine e(trainer.model(), tok.get(), infer::EngineConfig{});
    return e.generate({ids}, {sp})[0].outputs[0].logprobs;
  };
  std::vector<int32_t> ids = tok->encode(prompt);
  EXPECT_TRUE(same_float_bits(ck[0], engine_logprobs(ids))) << "generate --checkpoint vs the engine on the trainer's model";
  ASSERT_GE(tok->bos_id(), 0);
  ids.insert(ids.begin(), tok->bos_id());  // a Llama HF model's prompts get the tokenizer's BOS (load_hf_model)
  EXPECT_TRUE(same_float_bits(from_hf[0], engine_logprobs(ids))) << "generate --hf vs the engine on the trainer's model";
  // The generator ran the composed path (composed::swiglu has the fused forward bits, so
  // the logprobs alone cannot show it): generate reports the overridden forwards.
  for (const std::string* out : {&ck_out, &hf_out}) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(*out, m, std::regex("model.overrides: swiglu=composed:\\* ran ([0-9]+) forwards")))
        << *out;
    EXPECT_GT(std::stol(m[1]), 0);
  }

  // --model.overrides adds entries; a trainer-path-only one is refused, exit 2.
  const auto [rc, msg] = run_titan("generate --checkpoint '" + (dump / "checkpoint").string() +
                                   "' --prompt x --max-tokens 2 --model.overrides=attention=reference");
  EXPECT_EQ(rc, 2) << msg;
  EXPECT_NE(msg.find("'attention=reference' (generate --model.overrides) runs on the trainer path only"),
            std::string::npos)
      << msg;
  fs::remove_all(dump);
}

TEST(GenerateOverrides, TrainerOnlyOverridesAreRefusedByGenerateServeAndRl) {
  const fs::path dump = fs::path(::testing::TempDir()) / ("titan_gen_ovr_ref_" + std::to_string(getpid()));
  fs::remove_all(dump);
  const auto [trc, tmsg] = run_titan(
      "train --recipe debugmodel --training.steps=2 --lr_scheduler.warmup_steps=1 --validation.enabled=false "
      "--checkpoint.enable=true --checkpoint.interval=2 --checkpoint.export_hf=true "
      "'--model.overrides=attention=reference:layers.0.*' --job.dump_folder='" +
      dump.string() + "'");
  ASSERT_EQ(trc, 0) << tmsg;
  const std::string want = "'attention=reference:layers.0.*' (--checkpoint " + (dump / "config.toml").string() +
                           ") runs on the trainer path only";
  for (const char* cmd : {"generate --prompt x --max-tokens 2", "serve --port 0"}) {
    const auto [rc, msg] = run_titan(std::string(cmd) + " --checkpoint '" + (dump / "checkpoint").string() + "'");
    EXPECT_EQ(rc, 2) << cmd << "\n" << msg;
    EXPECT_NE(msg.find(want), std::string::npos) << cmd << "\n" << msg;
  }
  const auto [hrc, hmsg] = run_titan("generate --prompt x --max-tokens 2 --hf '" + (dump / "hf").string() + "'");
  EXPECT_EQ(hrc, 2) << hmsg;
  EXPECT_NE(hmsg.find("'attention=reference:layers.0.*' (config.json " + (dump / "hf").string() +
                      ") runs on the trainer path only"),
            std::string::npos)
      << hmsg;
  const auto [rrc, rmsg] = run_titan("rl --recipe alphabet_sort_grpo --rl.init_from= --training.steps=1 "
                                     "--model.overrides=attention=reference --job.dump_folder='" +
                                     (dump / "rl").string() + "'");
  EXPECT_EQ(rrc, 2) << rmsg;
  EXPECT_NE(rmsg.find("'attention=reference' (titan rl) runs on the trainer path only"), std::string::npos) << rmsg;
  fs::remove_all(dump);
}

}  // namespace
