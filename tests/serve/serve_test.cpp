// `titan serve` with real clients: the venv's `openai` package (serve_client.py, one
// case per test) and curl, against a server process on a port it picked itself
// (--port 0 --port-file), bound to 127.0.0.1. The model is made here: a random
// qwen3-style model with the built-in byte_chat tokenizer, saved as a Hugging Face
// directory (config.json + model.safetensors + titan_tokenizer.txt), so transformers
// can load the same weights as the logprob oracle. One server serves the ServeApi
// cases; StopInsideToken uses a model with the Qwen3 BPE tokenizer (multi-character
// tokens); Shutdown starts its own server and stops it with SIGTERM mid-stream.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "titan/checkpoint/hf_config.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/config/resolve.h"
#include "titan/core/fs.h"
#include "titan/models/common/decoder.h"
#include "titan/models/family.h"
#include "tests/util/titan_exe.h"
#include "tests/util/venv_python.h"

using namespace titan;

namespace {

namespace fs = std::filesystem;

std::string shell(const std::string& cmd, int* status = nullptr) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  for (size_t n; p && (n = fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), n);
  const int st = p ? pclose(p) : -1;
  if (status) *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

std::string client_script() { return std::string(TITAN_SOURCE_DIR) + "/tests/serve/serve_client.py"; }

// A random model saved as an HF directory. tokenizer: "byte_chat" or a tokenizer.json path.
fs::path make_model(const std::string& name, const std::string& tokenizer, int64_t vocab, int64_t context) {
  models::TransformerConfig cfg;
  cfg.family = "qwen3";
  cfg.vocab_size = vocab;
  cfg.hidden_size = 64;
  cfg.intermediate_size = 128;
  cfg.num_hidden_layers = 2;
  cfg.num_attention_heads = 4;
  cfg.num_key_value_heads = 2;
  cfg.head_dim = 16;
  cfg.qk_norm = true;
  cfg.tie_word_embeddings = true;
  cfg.max_position_embeddings = context;
  cfg.rope_theta = 1e6;
  cfg.rms_norm_eps = 1e-6;
  if (tokenizer == "byte_chat") cfg.eos_token_id = 260;
  models::Decoder model(cfg);
  model.init_weights(5);
  const fs::path dir = fs::path(::testing::TempDir()) / (name + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  save_safetensors((dir / "model.safetensors").string(), models::hf_state_dict(model), {});
  save_hf_config((dir / "config.json").string(), models::config_to_hf(cfg));
  if (tokenizer == "byte_chat") write_file_atomic((dir / "titan_tokenizer.txt").string(), "byte_chat\n");
  else fs::copy_file(tokenizer, dir / "tokenizer.json");
  return dir;
}

struct ServerProcess {
  pid_t pid = -1;
  int port = 0;
  fs::path log;

  ServerProcess() = default;
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;
  // A test that fails or throws half-way must not leave the server running (it holds
  // CTest's output pipe).
  ~ServerProcess() {
    if (pid > 0) stop(10);
  }

  void start(const fs::path& model, const std::vector<std::string>& extra) {
    const fs::path port_file = model / "port";
    log = model / "server.log";
    fs::remove(port_file);
    std::vector<std::string> args = {titan_exe_path(), "serve", "--hf", model.string(), "--served-model-name",
                                     "tiny", "--host", "127.0.0.1", "--port", "0", "--port-file",
                                     port_file.string(), "--threads", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      FILE* f = std::fopen(log.c_str(), "w");
      dup2(fileno(f), 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    for (int i = 0; i < 1200 && !fs::exists(port_file); ++i) {
      int st = 0;
      ASSERT_EQ(waitpid(pid, &st, WNOHANG), 0) << "serve exited early:\n" << read_log();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_TRUE(fs::exists(port_file)) << read_log();
    std::ifstream(port_file) >> port;
    ASSERT_GT(port, 0);
  }
  // SIGTERM, then the exit status (-1 if it did not exit within timeout_s).
  int stop(double timeout_s = 60) {
    if (pid <= 0) return -1;
    kill(pid, SIGTERM);
    int st = 0;
    for (int i = 0; i < timeout_s * 20; ++i) {
      if (waitpid(pid, &st, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    pid = -1;
    return -1;
  }
  std::string read_log() const {
    std::ifstream f(log);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
  static std::string titan_exe_path() { return titan::test::titan_exe(); }
};

class ServeApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new fs::path(make_model("titan_serve_byte", "byte_chat", 263, 2048));
    server_ = new ServerProcess();
    server_->start(*model_, {"--max-prompt-tokens", "300", "--max-tokens-limit", "1500", "--max-body-bytes",
                             "65536", "--max-concurrent-requests", "128"});
  }
  static void TearDownTestSuite() {
    if (server_) {
      const int code = server_->stop();
      EXPECT_EQ(code, 0) << server_->read_log();
    }
    delete server_;
    if (model_) fs::remove_all(*model_);
    delete model_;
  }
  void run_case(const std::string& name) {
    ASSERT_TRUE(server_ && server_->port > 0);
    int st = -1;
    const std::string out = shell("'" + titan::test::venv_python() + "' '" + client_script() + "' " + server_->url() +
                                      " '" + model_->string() + "' " + name,
                                  &st);
    EXPECT_EQ(st, 0) << out << "\n--- server log ---\n" << server_->read_log();
    EXPECT_NE(out.find(name + ": ok"), std::string::npos) << out;
  }
  static ServerProcess* server_;
  static fs::path* model_;
};
ServerProcess* ServeApi::server_ = nullptr;
fs::path* ServeApi::model_ = nullptr;

TEST_F(ServeApi, Completions) { run_case("completions"); }
TEST_F(ServeApi, Chat) { run_case("chat"); }
TEST_F(ServeApi, Streaming) { run_case("streaming"); }
TEST_F(ServeApi, LogprobsEqualTransformers) { run_case("logprobs"); }
TEST_F(ServeApi, OutputIndependentOfNeighbours) { run_case("batch_invariance"); }
TEST_F(ServeApi, HundredConcurrentRequestsThenPoolFull) { run_case("concurrent100"); }
TEST_F(ServeApi, ClientDisconnectMidStreamCancels) { run_case("disconnect"); }
TEST_F(ServeApi, BadInputGets4xxAndServerGoesOn) { run_case("bad_input"); }

// curl, the other real client: a completion, a chat completion, an SSE stream, and a
// malformed body that gets OpenAI's error shape.
TEST_F(ServeApi, Curl) {
  const std::string base = "curl -s --max-time 60 " + server_->url();
  auto post = [&](const std::string& path, const std::string& body) {
    return shell(base + path + " -H 'Content-Type: application/json' -d '" + body + "'");
  };
  auto j = nlohmann::json::parse(post("/v1/completions", R"({"model": "tiny", "prompt": "Hi", "max_tokens": 5, "temperature": 0})"));
  EXPECT_EQ(j["object"], "text_completion") << j;
  EXPECT_LE(j["usage"]["completion_tokens"].get<int>(), 5) << j;
  j = nlohmann::json::parse(post("/v1/chat/completions",
                                 R"({"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5})"));
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant") << j;
  const std::string sse = post("/v1/completions", R"({"model": "tiny", "prompt": "Hi", "max_tokens": 4, "stream": true, "ignore_eos": true})");
  int events = 0;
  for (size_t at = 0; (at = sse.find("data: ", at)) != std::string::npos; at += 6) ++events;
  EXPECT_EQ(events, 5) << sse;  // 4 tokens + [DONE]
  EXPECT_NE(sse.find("data: [DONE]\n\n"), std::string::npos) << sse;
  j = nlohmann::json::parse(post("/v1/completions", R"({"model": "tiny", "prompt": )"));
  EXPECT_EQ(j["error"]["type"], "invalid_request_error") << j;
  j = nlohmann::json::parse(shell(base + "/health"));
  EXPECT_EQ(j["status"], "ok") << j;
}

TEST(ServeBpe, StopInsideToken) {
  const std::string tok = config::shared_data_dir() + "/qwen3-tokenizer/tokenizer.json";
  if (!file_exists(tok)) GTEST_SKIP() << "no " << tok;
  const fs::path model = make_model("titan_serve_bpe", tok, 151936, 256);
  ServerProcess server;
  server.start(model, {});
  int st = -1;
  const std::string out = shell("'" + titan::test::venv_python() + "' '" + client_script() + "' " + server.url() +
                                    " '" + model.string() + "' stop_in_token",
                                &st);
  EXPECT_EQ(st, 0) << out << "\n--- server log ---\n" << server.read_log();
  EXPECT_EQ(server.stop(), 0) << server.read_log();
  fs::remove_all(model);
}

// SIGTERM while a stream is in flight: the stream is finished or cancelled (it ends
// with data: [DONE]), new requests are refused, the process exits 0.
TEST(ServeShutdown, SigtermFinishesOrCancelsInFlight) {
  const fs::path model = make_model("titan_serve_stop", "byte_chat", 263, 4096);
  ServerProcess server;
  server.start(model, {"--shutdown-grace", "0", "--max-tokens-limit", "4000"});
  const std::string out_file = (model / "stream.txt").string();
  const std::string cmd = "curl -s -N --max-time 60 " + server.url() +
                          "/v1/completions -H 'Content-Type: application/json' -d '{\"model\": \"tiny\", \"prompt\": "
                          "\"Go\", \"max_tokens\": 4000, \"ignore_eos\": true, \"stream\": true}' > '" + out_file + "' &";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  for (int i = 0; i < 200 && (!fs::exists(out_file) || fs::file_size(out_file) < 200); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_GE(fs::file_size(out_file), 200u) << server.read_log();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(server.stop(), 0) << server.read_log();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::ifstream f(out_file);
  const std::string sse((std::istreambuf_iterator<char>(f)), {});
  EXPECT_NE(sse.find("\"finish_reason\":\"abort\""), std::string::npos) << sse.substr(sse.size() > 500 ? sse.size() - 500 : 0);
  EXPECT_NE(sse.find("data: [DONE]"), std::string::npos);
  const std::string log = server.read_log();
  EXPECT_NE(log.find("SIGTERM received"), std::string::npos) << log;
  EXPECT_NE(log.find("cancelling 1 request"), std::string::npos) << log;
  fs::remove_all(model);
}

}  // namespace
