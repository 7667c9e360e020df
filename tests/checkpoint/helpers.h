// Shared helpers of the checkpoint tests: a scratch directory, raw file writes,
// an error-message matcher and a way to run the PyTorch/numpy reference scripts.
#pragma once
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "titan/core/error.h"

namespace titan::test {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents at the end.
struct TempDir {
  std::string path;
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/titan_ckpt_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
    path = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
  // File names in the directory (sorted), without . and ..
  std::vector<std::string> list() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path)) out.push_back(e.path().filename());
    std::sort(out.begin(), out.end());
    return out;
  }
};

inline void write_raw(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_raw(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Runs `stmt`, expects a titan::Error whose message contains every substring.
template <typename F>
::testing::AssertionResult throws_with(F&& stmt, const std::vector<std::string>& subs) {
  try {
    stmt();
  } catch (const titan::Error& e) {
    const std::string msg = e.what();
    for (const auto& s : subs)
      if (msg.find(s) == std::string::npos)
        return ::testing::AssertionFailure() << "message lacks \"" << s << "\": " << msg;
    if (msg.find('\n') != std::string::npos)
      return ::testing::AssertionFailure() << "message is not one line: " << msg;
    return ::testing::AssertionSuccess() << msg;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-titan exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

inline bool have_python() { return ::access("/usr/bin/python3", X_OK) == 0; }

// Runs /usr/bin/python3 <script in tests/reference> <args>; returns the exit code and
// fills `out` with stdout+stderr.
inline int run_python(const std::string& script, const std::string& args, std::string& out) {
  const std::string cmd = "/usr/bin/python3 " + std::string(TITAN_SOURCE_DIR) + "/tests/reference/" +
                          script + " " + args + " 2>&1";
  out.clear();
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = ::pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace titan::test
