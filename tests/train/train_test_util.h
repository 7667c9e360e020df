// Helpers of the trainer tests: scratch run folders, metrics.jsonl rows, parameter
// snapshots compared with memcmp, and `titan train` run as a child process.
#pragma once
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "titan/checkpoint/safetensors.h"
#include "titan/checkpoint/train_checkpoint.h"
#include "titan/config/resolve.h"
#include "titan/core/fs.h"
#include "titan/models/common/decoder.h"
#include "tests/util/test_files.h"
#include "tests/util/titan_exe.h"

namespace titan::test {

namespace fs = std::filesystem;

// step -> loss of the training rows (rows with a "loss").
inline std::map<int64_t, double> losses(const std::vector<nlohmann::json>& rows) {
  std::map<int64_t, double> out;
  for (const auto& r : rows)
    if (r.contains("loss")) {
      EXPECT_FALSE(out.count(r["step"].get<int64_t>())) << "step logged twice: " << r.dump();
      out[r["step"].get<int64_t>()] = r["loss"].get<double>();
    }
  return out;
}

// Copies of a model's parameters, by name.
inline std::map<std::string, std::vector<float>> snapshot(const models::Decoder& m) {
  std::map<std::string, std::vector<float>> out;
  for (auto& [name, p] : m.named_parameters()) {
    Tensor c = p.contiguous();
    out[name].assign(c.data<float>(), c.data<float>() + c.numel());
  }
  return out;
}

// The model tensors of a training checkpoint directory, by titan name.
inline std::map<std::string, std::vector<float>> checkpoint_weights(const std::string& dir) {
  std::map<std::string, std::vector<float>> out;
  for (auto& [name, t] : CheckpointManager::load(dir).model) {
    Tensor c = t.contiguous();
    out[name].assign(c.data<float>(), c.data<float>() + c.numel());
  }
  return out;
}

inline void expect_same_weights(const std::map<std::string, std::vector<float>>& a,
                                const std::map<std::string, std::vector<float>>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, v] : a) {
    auto it = b.find(name);
    ASSERT_NE(it, b.end()) << name;
    ASSERT_EQ(v.size(), it->second.size()) << name;
    EXPECT_EQ(std::memcmp(v.data(), it->second.data(), v.size() * sizeof(float)), 0) << name;
  }
}

// step-N directories of a checkpoint folder: step -> valid (MANIFEST complete).
inline std::map<int64_t, bool> step_dirs(const std::string& folder) {
  std::map<int64_t, bool> out;
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) return out;
  for (auto& e : fs::directory_iterator(folder, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("step-", 0) != 0) continue;
    try {
      out[std::stoll(n.substr(5))] = CheckpointManager::is_valid(e.path().string());
    } catch (...) {
    }
  }
  return out;
}

// `titan train ARGS...` as a child process with stdout+stderr in `log`.
struct Child {
  pid_t pid = -1;
  std::string log;
  int status = 0;

  Child(const std::vector<std::string>& args, std::string log_path) : log(std::move(log_path)) {
    std::vector<std::string> all = {titan_exe(), "train"};
    all.insert(all.end(), args.begin(), args.end());
    pid = fork();
    if (pid == 0) {
      FILE* f = std::fopen(log.c_str(), "w");
      if (f) {
        dup2(fileno(f), 1);
        dup2(fileno(f), 2);
      }
      std::vector<char*> argv;
      for (auto& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  // True once the child has exited (then `status` is its wait status).
  bool exited() {
    if (pid <= 0) return true;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) pid = -1;
    return pid <= 0;
  }
  void wait() {
    if (pid > 0 && waitpid(pid, &status, 0) == pid) pid = -1;
  }
  void kill_now(int sig) {
    if (pid > 0) ::kill(pid, sig);
  }
  int exit_code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
  std::string output() const {
    std::ifstream f(log);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  ~Child() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
    }
  }
};

}  // namespace titan::test
