// Helpers of the transformers oracle tests (tests/models/*_test.cpp with a script in
// tests/reference/): the reference scripts write raw little-endian f32 files.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <vector>

namespace titan::test {

// All the f32 values of a raw file, in order ({} if it cannot be read).
inline std::vector<float> read_floats(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::vector<float> v;
  float x;
  while (f.read(reinterpret_cast<char*>(&x), 4)) v.push_back(x);
  return v;
}

// Two packed token sequences (70 and 9 tokens, ids < 128) of the hybrid and MLA oracles.
inline std::vector<std::vector<int32_t>> oracle_sequences() {
  std::vector<std::vector<int32_t>> s(2);
  for (int i = 0; i < 70; ++i) s[0].push_back((i * 37 + 5) % 128);
  for (int i = 0; i < 9; ++i) s[1].push_back((i * 11 + 3) % 128);
  return s;
}

// max |a - b| / max |b| over all values (the logit oracles' 1e-4 criterion).
inline double max_rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, m = 0;
  for (size_t i = 0; i < b.size() && i < a.size(); ++i) {
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
    m = std::max(m, std::fabs(static_cast<double>(b[i])));
  }
  return d / m;
}

}  // namespace titan::test
