// Helpers shared by the tests in tests/optim/: a temporary exchange directory with
// raw float32 files and a JSON meta file, running a PyTorch oracle script from
// tests/reference/ with /usr/bin/python3 (python3-torch 1.13), and ulp distances.
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "titan/core/tensor.h"

namespace titan::optim::testing {

// A fresh /tmp/titan_optim_XXXXXX directory, removed on destruction.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/titan_optim_XXXXXX";
    if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

  void write_f32(const std::string& name, const std::vector<float>& v) const {
    std::ofstream f(file(name), std::ios::binary);
    f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
    if (!f.good()) throw std::runtime_error("cannot write " + file(name));
  }
  std::vector<float> read_f32(const std::string& name, size_t n) const {
    std::vector<float> v(n);
    std::ifstream f(file(name), std::ios::binary);
    f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * 4));
    if (!f.good() || f.peek() != EOF) throw std::runtime_error("bad size or missing: " + file(name));
    return v;
  }
  void write_json(const std::string& name, const nlohmann::json& j) const {
    std::ofstream f(file(name));
    f << j.dump(1);
  }

 private:
  std::string path_;
};

// Runs tests/reference/<script> <dir> with /usr/bin/python3; returns the exit code.
inline int run_reference(const std::string& script, const TempDir& dir) {
  const std::string cmd = "OMP_NUM_THREADS=1 /usr/bin/python3 " TITAN_SOURCE_DIR "/tests/reference/" +
                          script + " '" + dir.path() + "'";
  return std::system(cmd.c_str());
}

// Distance in units in the last place between two finite floats of any sign.
inline int64_t ulp_distance(float a, float b) {
  auto key = [](float x) {
    int32_t i;
    std::memcpy(&i, &x, 4);
    return i < 0 ? static_cast<int64_t>(INT32_MIN) - i : static_cast<int64_t>(i);
  };
  const int64_t d = key(a) - key(b);
  return d < 0 ? -d : d;
}

inline std::vector<float> normal_vec(size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline Tensor param_tensor(const std::vector<float>& v, const Shape& shape) {
  return Tensor::from_vector(v, shape);
}

inline void set_grad(Tensor p, const std::vector<float>& g) {
  p.set_grad(Tensor::from_vector(g, p.shape()));
}

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

}  // namespace titan::optim::testing
