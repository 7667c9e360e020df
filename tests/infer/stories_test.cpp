// A real model: llama2.c's stories260K with the tok512 SentencePiece tokenizer,
// greedy, must print the TinyStories sample of stories260K.md (karpathy/llama2.c:
// `./run stories260K.bin -z tok512.bin -t 0.0`, 256 steps from BOS, stopping at BOS).
// Checked through the engine and through the `titan generate` program (streaming and
// JSONL modes).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "titan/config/resolve.h"
#include "titan/core/fs.h"
#include "titan/infer/engine.h"
#include "titan/infer/model_loader.h"
#include "tests/util/titan_exe.h"

using namespace titan;
using namespace titan::infer;

namespace {

namespace fs = std::filesystem;

const std::vector<int32_t> kFirst20 = {403, 407, 261, 378, 432, 383, 286, 261, 376, 298,
                                       315, 421, 395, 317, 426, 338, 401, 396, 267, 337};
const std::string kStart =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.";

std::string data_dir() { return config::shared_data_dir() + "/stories260k"; }

// The sample text of stories260K.md: the fenced block after the `./run` line.
std::string reference_text() {
  const std::string md = read_file(data_dir() + "/stories260K.md");
  size_t at = md.find("./run stories260K");
  at = md.find('\n', at) + 1;
  const size_t end = md.find("```", at);
  std::string t = md.substr(at, end - at);
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  return t;
}

using titan::test::titan_exe;

std::pair<int, std::string> run_cli(const std::string& args) {
  const std::string cmd = "'" + titan_exe() + "' generate " + args + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  if (!p) return {-1, out};
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

class Stories : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!file_exists(data_dir() + "/stories260K.bin")) GTEST_SKIP() << "no " << data_dir();
  }
};

TEST_F(Stories, GreedyMatchesLlama2cRunC) {
  LoadedModel m = load_llama2c_model(data_dir() + "/stories260K.bin", data_dir() + "/tok512.model");
  Engine e(*m.model, m.tokenizer.get(), EngineConfig{});
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 256;  // run.c -n 256: feeds positions 0..255 (BOS first), prints the 256 predictions
  p.stop_token_ids = m.stop_token_ids;
  const CompletionOutput c = e.generate({{m.bos_id}}, p)[0].outputs[0];
  ASSERT_GE(c.token_ids.size(), 20u);
  EXPECT_EQ(std::vector<int32_t>(c.token_ids.begin(), c.token_ids.begin() + 20), kFirst20);
  EXPECT_EQ(c.text.substr(0, kStart.size()), kStart);
  EXPECT_EQ(c.text, reference_text());
  for (float lp : c.logprobs) EXPECT_LE(lp, 0.0f);
}

TEST_F(Stories, GenerateCommandStreamsTheSample) {
  const std::string model = "--llama2c '" + data_dir() + "/stories260K.bin' --tokenizer '" + data_dir() +
                            "/tok512.model'";
  auto [code, out] = run_cli(model + " --prompt '' --temperature 0");
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(out, reference_text() + "\n");

  const fs::path dir = fs::path(::testing::TempDir()) / ("titan_generate_" + std::to_string(getpid()));
  fs::create_directories(dir);
  {
    std::ofstream in(dir / "prompts.jsonl");
    in << R"({"prompt": "", "max_tokens": 30})" << "\n"
       << R"({"prompt": "Once upon a time", "temperature": 0.8, "seed": 3, "max_tokens": 20, "n": 2})" << "\n"
       << R"({"prompt_token_ids": [1, 600], "max_tokens": 5})" << "\n";
  }
  auto [code2, out2] = run_cli(model + " --temperature 0 --input '" + (dir / "prompts.jsonl").string() +
                               "' --output '" + (dir / "out.jsonl").string() + "'");
  ASSERT_EQ(code2, 0) << out2;
  std::ifstream res(dir / "out.jsonl");
  std::vector<nlohmann::json> lines;
  for (std::string l; std::getline(res, l);) lines.push_back(nlohmann::json::parse(l));
  ASSERT_EQ(lines.size(), 4u);  // 1 + 2 samples + 1
  EXPECT_EQ(lines[0]["completion"].get<std::string>(), reference_text().substr(0, lines[0]["completion"].get<std::string>().size()));
  EXPECT_EQ(lines[0]["token_ids"].size(), 30u);
  EXPECT_EQ(lines[0]["logprobs"].size(), 30u);
  EXPECT_EQ(lines[0]["finish_reason"], "length");
  EXPECT_EQ(lines[0]["prompt_token_ids"], nlohmann::json::array({1}));
  EXPECT_EQ(lines[1]["prompt"], "Once upon a time");
  EXPECT_EQ(lines[1]["index"], 0);
  EXPECT_EQ(lines[2]["index"], 1);
  EXPECT_EQ(lines[3]["finish_reason"], "error");
  EXPECT_NE(lines[3]["error"].get<std::string>().find("prompt token 1 = 600 is outside the vocabulary [0, 512)"),
            std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
