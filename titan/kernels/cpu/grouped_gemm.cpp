#include "titan/kernels/cpu/grouped_gemm.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "titan/core/error.h"
#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/gemm.h"

namespace titan::kernels::cpu {

namespace {

void check_offsets(const char* fn, const std::vector<int64_t>& off) {
  TITAN_CHECK(!off.empty() && off[0] == 0, "{}: offsets must start with 0 ({} given)", fn,
              off.empty() ? std::string("none") : std::to_string(off[0]));
  for (size_t g = 1; g < off.size(); ++g)
    TITAN_CHECK(off[g] >= off[g - 1], "{}: offsets must be non-decreasing (offsets[{}] = {} < offsets[{}] = {})",
                fn, g, off[g], g - 1, off[g - 1]);
}

// Runs body(g) for every non-empty group g. Many groups: whole groups per thread,
// longest-processing-time-first onto the least-loaded thread (a deterministic
// assignment; each element is computed the same way whoever runs it). Few groups: one
// after another, each using the pool itself.
template <class F>
void for_groups(const std::vector<int64_t>& off, F&& body) {
  std::vector<int64_t> groups;
  for (size_t g = 0; g + 1 < off.size(); ++g)
    if (off[g + 1] > off[g]) groups.push_back(static_cast<int64_t>(g));
  const int T = num_threads();
  if (T <= 1 || static_cast<int64_t>(groups.size()) < 2 * T) {
    for (int64_t g : groups) body(g);
    return;
  }
  auto rows = [&](int64_t g) { return off[g + 1] - off[g]; };
  std::stable_sort(groups.begin(), groups.end(), [&](int64_t a, int64_t b) { return rows(a) > rows(b); });
  std::vector<std::vector<int64_t>> mine(static_cast<size_t>(T));
  std::vector<int64_t> load(static_cast<size_t>(T), 0);
  for (int64_t g : groups) {
    const size_t t = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    mine[t].push_back(g);
    load[t] += rows(g);
  }
  parallel_for(T, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t)
      for (int64_t g : mine[static_cast<size_t>(t)]) body(g);
  });
}

}  // namespace

void grouped_gemm_f32(const std::vector<int64_t>& offsets, int64_t N, int64_t K, const float* A,
                      int64_t lda, const float* B, bool b_trans, float* C, int64_t ldc) {
  check_offsets("grouped_gemm_f32", offsets);
  TITAN_CHECK(N >= 0 && K >= 0, "grouped_gemm_f32: negative size (N = {}, K = {})", N, K);
  const int64_t M = offsets.back();
  if (M == 0 || N == 0) return;
  TITAN_CHECK(A != nullptr && C != nullptr && (B != nullptr || K == 0),
              "grouped_gemm_f32: null pointer for a non-empty problem");
  for_groups(offsets, [&](int64_t g) {
    const int64_t r0 = offsets[g], m = offsets[g + 1] - r0;
    gemm_f32(m, N, K, A + r0 * lda, lda, B + g * N * K, b_trans ? K : N, b_trans, C + r0 * ldc, ldc,
             false);
  });
}

void grouped_gemm_f32_tn(const std::vector<int64_t>& offsets, int64_t M_out, int64_t N_out,
                         const float* A, int64_t lda, const float* B, int64_t ldb, float* C) {
  check_offsets("grouped_gemm_f32_tn", offsets);
  TITAN_CHECK(M_out >= 0 && N_out >= 0, "grouped_gemm_f32_tn: negative size ({} x {})", M_out, N_out);
  const int64_t G = static_cast<int64_t>(offsets.size()) - 1, per = M_out * N_out;
  if (per == 0 || G == 0) return;
  TITAN_CHECK(C != nullptr, "grouped_gemm_f32_tn: null output");
  for (int64_t g = 0; g < G; ++g)
    if (offsets[g + 1] == offsets[g]) std::memset(C + g * per, 0, static_cast<size_t>(per) * sizeof(float));
  if (offsets.back() == 0) return;
  TITAN_CHECK(A != nullptr && B != nullptr, "grouped_gemm_f32_tn: null pointer for a non-empty problem");
  for_groups(offsets, [&](int64_t g) {
    const int64_t r0 = offsets[g], m = offsets[g + 1] - r0;
    gemm_f32_tn(M_out, N_out, m, A + r0 * lda, lda, B + r0 * ldb, ldb, C + g * per, N_out, false);
  });
}

}  // namespace titan::kernels::cpu
