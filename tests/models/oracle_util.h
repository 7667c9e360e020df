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

}  // namespace titan::test
