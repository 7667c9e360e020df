// Helpers shared by the row-kernel tests (norm, softmax, loss, rope, activation):
// deterministic random inputs, bitwise comparison, and the batch-invariance harness
// of notes/batch-invariance.md ("How to test it").
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "titan/core/thread_pool.h"

namespace titan::test {

inline std::vector<float> randn(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(gen);
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

inline bool same_bits(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, sizeof(float) * static_cast<size_t>(n)) == 0;
}

// max_i |a_i − b_i| / (atol + rtol·|b_i|) must be <= 1.
inline void expect_close(const float* got, const double* want, int64_t n, double rtol, double atol,
                         const char* what) {
  for (int64_t i = 0; i < n; ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= atol + rtol * std::abs(want[i]))) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i]
                    << " (|err| = " << err << ")";
      return;
    }
  }
}
inline void expect_close(const std::vector<float>& got, const std::vector<double>& want,
                         double rtol, double atol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  expect_close(got.data(), want.data(), static_cast<int64_t>(got.size()), rtol, atol, what);
}

// Restores the thread count on scope exit.
struct ThreadGuard {
  int saved = titan::num_threads();
  ~ThreadGuard() { titan::set_num_threads(saved); }
};

// The batch-invariance check. `run(rows, out)` computes the kernel on a batch made of
// the pool rows `rows` (in that order) and writes out_row floats per batch row to out.
// The reference is the whole pool in order with 1 thread; then every batch size of
// {1, 2, 7, 64, 257} (clipped to the pool), drawn shuffled from the pool, with 1 and 2
// threads, must give each row the reference's bits (memcmp).
inline void expect_batch_invariant(
    int64_t pool_rows, int64_t out_row,
    const std::function<void(const std::vector<int64_t>& rows, std::vector<float>& out)>& run,
    const char* what) {
  ThreadGuard guard;
  titan::set_num_threads(1);
  std::vector<int64_t> all(static_cast<size_t>(pool_rows));
  std::iota(all.begin(), all.end(), 0);
  std::vector<float> ref(static_cast<size_t>(pool_rows * out_row));
  run(all, ref);
  std::mt19937 gen(1234);
  for (int threads : {1, 2}) {
    titan::set_num_threads(threads);
    for (int64_t B : {1, 2, 7, 64, 257}) {
      B = std::min(B, pool_rows);
      std::vector<int64_t> perm = all;
      std::shuffle(perm.begin(), perm.end(), gen);
      perm.resize(static_cast<size_t>(B));
      std::vector<float> out(static_cast<size_t>(B * out_row));
      run(perm, out);
      for (int64_t j = 0; j < B; ++j) {
        const int64_t r = perm[static_cast<size_t>(j)];
        ASSERT_TRUE(same_bits(out.data() + j * out_row, ref.data() + r * out_row, out_row))
            << what << ": pool row " << r << " at position " << j << " of a batch of " << B
            << " rows with " << threads << " thread(s) differs from the reference bits";
      }
    }
  }
}

// Gathers rows (each `len` floats) of src into a new batch.
inline std::vector<float> gather_rows(const std::vector<float>& src, int64_t len,
                                      const std::vector<int64_t>& rows) {
  std::vector<float> out(rows.size() * static_cast<size_t>(len));
  for (size_t j = 0; j < rows.size(); ++j)
    std::copy_n(src.begin() + rows[j] * len, len, out.begin() + static_cast<int64_t>(j) * len);
  return out;
}

}  // namespace titan::test
