// Helpers of the tests that compare titan with an oracle's output files.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <fstream>
#include <string>
#include <vector>

namespace titan::test {

// max_i |a[i] - b[i]| in double over the first a.size() elements (b at least as long).
template <typename A, typename B>
double max_abs_diff(const A& a, const B& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}

// n little-endian float64 values from path (an oracle's raw output); a failed read
// fails the test (the values are then 0).
inline std::vector<double> read_f64(const std::string& path, size_t n) {
  std::vector<double> v(n);
  std::ifstream f(path, std::ios::binary);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * 8));
  EXPECT_TRUE(f.good()) << path;
  return v;
}

}  // namespace titan::test
