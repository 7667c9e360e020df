// Hostile inputs through the `titan` program: each must end in a one-line error with
// exit code 2, quickly, never a crash (stack overflow), an allocation failure or
// minutes of work. Inputs: values nested 100k deep in config.json, a safetensors
// header, a tokenizer.json and a generate JSONL line; sizes beyond the weights
// (num_hidden_layers) or beyond the stated limits (model.n_layers, generate --n).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/util/titan_exe.h"
#include "titan/checkpoint/hf_config.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/core/fs.h"
#include "titan/models/common/decoder.h"
#include "titan/models/family.h"

namespace titan {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct Result {
  int code = -1;       // exit code; -1 for a signal
  std::string out;     // stdout + stderr
  double seconds = 0;
};

Result run(const std::string& args) {
  const std::string cmd = "'" + test::titan_exe() + "' " + args + " 2>&1";
  const auto t0 = std::chrono::steady_clock::now();
  FILE* p = popen(cmd.c_str(), "r");
  Result r;
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Exit 2, one line "error: ..." holding `sub`, within the time bound (the issue asks
// < 1 s; the bound is loose for a loaded machine, the measured time is printed).
void expect_one_line_error(const Result& r, const std::string& sub, double max_s = 10.0) {
  EXPECT_EQ(r.code, 2) << r.out.substr(0, 2000);
  EXPECT_NE(r.out.find(sub), std::string::npos) << r.out.substr(0, 2000);
  EXPECT_LT(r.out.size(), 600u) << r.out.substr(0, 2000);
  EXPECT_LE(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out.substr(0, 2000);
  EXPECT_LT(r.seconds, max_s) << r.out;
  std::printf("%.3f s: %s", r.seconds, r.out.c_str());
}

std::string nested(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// A tiny random llama model in HF layout with the built-in byte tokenizer.
struct TinyHf {
  fs::path dir;
  TinyHf() {
    models::TransformerConfig cfg;
    cfg.family = "llama3";
    cfg.vocab_size = 259;
    cfg.hidden_size = 16;
    cfg.intermediate_size = 32;
    cfg.num_hidden_layers = 2;
    cfg.num_attention_heads = 2;
    cfg.num_key_value_heads = 1;
    cfg.head_dim = 8;
    cfg.max_position_embeddings = 64;
    models::Decoder model(cfg);
    model.init_weights(3);
    dir = fs::path(::testing::TempDir()) / ("titan_bad_input_" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    save_safetensors((dir / "model.safetensors").string(), models::hf_state_dict(model), {});
    save_hf_config((dir / "config.json").string(), models::config_to_hf(cfg));
    std::ofstream(dir / "titan_tokenizer.txt") << "byte\n";
  }
  ~TinyHf() { fs::remove_all(dir); }
  json config() const { return json::parse(read_file((dir / "config.json").string())); }
  void write_config(const std::string& text) const { std::ofstream(dir / "config.json", std::ios::trunc) << text; }
  std::string generate(const std::string& more) const {
    return "generate --hf '" + dir.string() + "' --max-tokens 2 --temperature 0 --quiet " + more;
  }
};

TEST(BadInputCli, TinyModelGenerates) {  // the baseline the other cases break
  TinyHf m;
  const Result r = run(m.generate("--prompt ab"));
  EXPECT_EQ(r.code, 0) << r.out;
}

TEST(BadInputCli, DeeplyNestedConfigJson) {
  TinyHf m;
  const std::string good = m.config().dump();
  m.write_config("{\"unknown_field\": " + nested(100000) + ", " + good.substr(1));
  expect_one_line_error(run(m.generate("--prompt ab")), "nested deeper than 64 levels");
}

TEST(BadInputCli, DeeplyNestedSafetensorsHeader) {
  TinyHf m;
  const std::string h = "{\"a\": " + nested(100000) + "}";
  const uint64_t n = h.size();
  std::ofstream(m.dir / "model.safetensors", std::ios::binary | std::ios::trunc)
      << std::string(reinterpret_cast<const char*>(&n), 8) << h;
  expect_one_line_error(run(m.generate("--prompt ab")), "nested deeper than 8 levels");
}

TEST(BadInputCli, DeeplyNestedTokenizerJson) {
  TinyHf m;
  fs::remove(m.dir / "titan_tokenizer.txt");
  std::ofstream(m.dir / "tokenizer.json") << "{\"model\": " << nested(100000) << "}";
  expect_one_line_error(run(m.generate("--prompt ab")), "nested deeper than 64 levels");
}

TEST(BadInputCli, DeeplyNestedGenerateJsonl) {
  TinyHf m;
  const fs::path in = m.dir / "in.jsonl", out = m.dir / "out.jsonl";
  std::ofstream(in) << "{\"prompt\": \"a\"}\n{\"prompt\": \"b\", \"stop\": " << nested(100000) << "}\n";
  const Result r = run(m.generate("--input '" + in.string() + "' --output '" + out.string() + "'"));
  expect_one_line_error(r, "in.jsonl:2: JSON nested deeper than 64 levels");
  EXPECT_FALSE(fs::exists(out));
  // A long bad value is cut short in the message.
  std::ofstream(in, std::ios::trunc) << "{\"prompt\": \"a\", \"stop\": [\"" << std::string(1 << 20, 'x') << "\", 3]}\n";
  expect_one_line_error(run(m.generate("--input '" + in.string() + "' --output '" + out.string() + "'")),
                        "in.jsonl:1: \"stop[1]\" must be a string, got 3");
  std::ofstream(in, std::ios::trunc) << "{\"prompt\": \"a\", \"stop\": \"" << std::string(1 << 20, 'x') << "\", \"n\": 1.5}\n";
  expect_one_line_error(run(m.generate("--input '" + in.string() + "' --output '" + out.string() + "'")),
                        "in.jsonl:1: \"n\" must be an integer, got 1.5");
  std::ofstream(in, std::ios::trunc) << "{\"prompt_token_ids\": [1e20]}\n";
  expect_one_line_error(run(m.generate("--input '" + in.string() + "' --output '" + out.string() + "'")),
                        "\"prompt_token_ids[0]\" must be an integer, got 1e+20");
}

// More layers than the weights hold: refused from the weights' names before the
// model is built (building 3000 layers first took tens of seconds, 1M minutes).
TEST(BadInputCli, ConfigLayersBeyondTheWeights) {
  TinyHf m;
  json c = m.config();
  c["num_hidden_layers"] = 3000;
  m.write_config(c.dump());
  expect_one_line_error(run(m.generate("--prompt ab")),
                        "num_hidden_layers is 3000 but the weights hold 2 layer(s): no tensor 'model.layers.2.*'", 5.0);
  c["num_hidden_layers"] = 1000000;
  m.write_config(c.dump());
  expect_one_line_error(run(m.generate("--prompt ab")), "'num_hidden_layers' = 1000000 exceeds the limit of 4096",
                        5.0);
  c["num_hidden_layers"] = 2;
  c["hidden_size"] = 60000;
  c.erase("head_dim");
  m.write_config(c.dump());
  expect_one_line_error(run(m.generate("--prompt ab")), "vocab_size x hidden_size give [259, 60000]", 5.0);
}

TEST(BadInputCli, TrainModelSizesBeyondTheLimits) {
  expect_one_line_error(run("train --model.n_layers=2000000000 --print-config"),
                        "model.n_layers=2000000000 exceeds the limit of 4096", 5.0);
  expect_one_line_error(run("train --model.n_layers=2000000000"), "model.n_layers=2000000000 exceeds the limit", 5.0);
  // Within every per-field limit, but no host holds the weights.
  const TinyHf m;
  expect_one_line_error(run("train --model.n_layers=4096 --model.dim=65536 --model.n_heads=64 "
                            "--model.ffn_hidden_dim=1048576 --training.steps=1 --job.dump_folder='" +
                            (m.dir / "run").string() + "'"),
                        "GiB of f32 weights alone, more than this host's", 5.0);
}

TEST(BadInputCli, GenerateSamplesBeyondTheLimit) {
  TinyHf m;
  expect_one_line_error(run(m.generate("--prompt ab --n 100000000")), "SamplingParams.n must be in [1, 4096]", 5.0);
  // Refused before the model loads: a missing model is not reached.
  expect_one_line_error(run("generate --hf /nonexistent --prompt ab --n 100000000"),
                        "SamplingParams.n must be in [1, 4096], got 100000000", 5.0);
}

}  // namespace
}  // namespace titan
