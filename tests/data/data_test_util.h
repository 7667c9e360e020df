// Helpers for the dataset / token cache / loader tests: a scratch directory, file
// writing, where the shared data lives, and error-message matching.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "titan/config/resolve.h"
#include "titan/core/error.h"
#include "titan/core/tensor.h"

namespace titan::data::testing {

// The repository's data/ (titan::config::shared_data_dir(): $TITAN_DATA or
// $TITAN_SHARED/data override it).
inline std::string tinyshakespeare_path() { return config::shared_data_dir() + "/tinyshakespeare/input.txt"; }

// A fresh directory under $TMPDIR (or /tmp), removed with its contents at scope exit.
class ScratchDir {
 public:
  ScratchDir() {
    const char* t = std::getenv("TMPDIR");
    std::string tmpl = std::string(t && *t ? t : "/tmp") + "/titan_data_test.XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed: " + tmpl);
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  if (!f) throw std::runtime_error("cannot write " + path);
}

// Names of the entries of a directory (sorted), hidden ones included.
inline std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Runs fn, expects a titan::Error whose message contains every one of `parts`.
template <typename Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected a titan::Error";
  } catch (const titan::Error& e) {
    const std::string msg = e.what();
    for (const auto& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

inline std::vector<int32_t> ivec(const Tensor& t) {
  return t.to_vector<int32_t>();
}

}  // namespace titan::data::testing
