// Files and processes of tests: a fresh temp folder, metrics.jsonl rows, a file's
// bytes, a shell command's exit code and output, and bitwise equality of doubles.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace titan::test {

// A fresh, empty folder TempDir()/titan_<name>_<pid> (removed first if present). Each
// CTest case is its own process, so the pid keeps concurrent tests apart.
inline std::string fresh_dir(const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path d = fs::path(::testing::TempDir()) / ("titan_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

// DUMP/metrics.jsonl as JSON objects, in file order (a line still being written by a
// running child is skipped).
inline std::vector<nlohmann::json> read_metrics(const std::string& dump) {
  std::vector<nlohmann::json> rows;
  std::ifstream f(dump + "/metrics.jsonl");
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) rows.push_back(std::move(j));
  }
  return rows;
}

// The whole file as bytes ("" if it cannot be read).
inline std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Bitwise equality of two doubles (JSON keeps the shortest round-trip text).
inline bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

struct ShellResult {
  int code;         // exit status; -1 if the command could not start or was killed
  std::string out;  // what it printed on stdout (the caller adds 2>&1 for stderr)
};

// Runs CMD with /bin/sh and collects its stdout.
inline ShellResult run_shell(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr) << cmd;
  ShellResult r{-1, ""};
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace titan::test
