#include "titan/infer/sampler.h"

#include <algorithm>
#include <numeric>

#include "titan/core/error.h"
#include "titan/core/philox.h"
#include "titan/kernels/cpu/softmax.h"

namespace titan::infer {

namespace kc = titan::kernels::cpu;

double philox_uniform(uint64_t seed, uint64_t position, uint64_t sample_index) {
  const PhiloxCounter r = philox_draw(seed, position, sample_index);
  const uint64_t hi = r[0] >> 5, lo = r[1] >> 6;  // 27 + 26 bits
  return (static_cast<double>(hi) * 67108864.0 + static_cast<double>(lo)) / 9007199254740992.0;
}

uint64_t derive_request_seed(uint64_t engine_seed, uint64_t request_index) {
  const PhiloxCounter r = philox_draw(engine_seed, request_index, /*stream=*/0x5EEDull);
  return (static_cast<uint64_t>(r[0]) << 32) | r[1];
}

int32_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t j = 1; j < n; ++j)
    if (x[j] > x[best]) best = j;
  return static_cast<int32_t>(best);
}

namespace {

// Inverse CDF over p[ids[i]] (ids null: over p[0..n) in order).
int32_t draw(const float* p, const int32_t* ids, int64_t n, double u) {
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += p[ids ? ids[i] : i];
  const double target = u * total;
  double acc = 0;
  int64_t last_nonzero = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t j = ids ? ids[i] : static_cast<int32_t>(i);
    if (p[j] <= 0) continue;
    acc += p[j];
    last_nonzero = i;
    if (acc > target) return j;
  }
  return ids ? ids[last_nonzero] : static_cast<int32_t>(last_nonzero);
}

}  // namespace

int32_t sample_token(const float* logits, int64_t V, const SamplingParams& sp, uint64_t seed,
                     int sample_index, int64_t position, SamplerScratch& s) {
  TITAN_CHECK(V >= 1, "sample_token: V must be >= 1, got {}", V);
  if (sp.greedy()) return argmax(logits, V);
  const float inv_t = static_cast<float>(1.0 / sp.temperature);
  s.z.resize(V);
  s.p.resize(V);
  for (int64_t j = 0; j < V; ++j) s.z[j] = logits[j] * inv_t;
  kc::softmax_fwd(s.p.data(), s.z.data(), 1, V);
  const float* p = s.p.data();
  const double u = philox_uniform(seed, static_cast<uint64_t>(position), static_cast<uint64_t>(sample_index));

  const bool m_on = sp.min_p > 0, k_on = sp.top_k > 0 && sp.top_k < V, p_on = sp.top_p < 1.0;
  if (!m_on && !k_on && !p_on) return draw(p, nullptr, V, u);

  auto& cand = s.cand;
  cand.clear();
  if (m_on) {
    const float pmax = *std::max_element(p, p + V);
    const float thr = static_cast<float>(sp.min_p * pmax);
    for (int64_t j = 0; j < V; ++j)
      if (p[j] >= thr) cand.push_back(static_cast<int32_t>(j));
  } else {
    cand.resize(V);
    std::iota(cand.begin(), cand.end(), 0);
  }
  auto better = [p](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); };
  int64_t keep = static_cast<int64_t>(cand.size());
  if (k_on && sp.top_k < keep) {
    keep = sp.top_k;
    std::partial_sort(cand.begin(), cand.begin() + keep, cand.end(), better);
  }
  if (!p_on) return draw(p, cand.data(), keep, u);  // min-p only: id order; top-k: sorted
  // top-p over the first `keep` candidates: mass in id order (top-k: in sorted order).
  double mass = 0;
  for (int64_t i = 0; i < keep; ++i) mass += p[cand[i]];
  const double goal = sp.top_p * mass;
  // Sort a growing prefix until its running mass reaches the goal; the sorted prefix
  // (and so the cut) is the same whatever the prefix length sorted.
  int64_t m = std::min<int64_t>(keep, 64), cut = keep;
  for (;;) {
    if (!k_on) std::partial_sort(cand.begin(), cand.begin() + m, cand.end(), better);
    double cum = 0;
    int64_t i = 0;
    for (; i < m; ++i) {
      cum += p[cand[i]];
      if (cum >= goal) break;
    }
    if (i < m) {
      cut = i + 1;
      break;
    }
    if (m == keep) break;  // rounding: the whole set
    m = std::min<int64_t>(keep, m * 4);
  }
  return draw(p, cand.data(), cut, u);
}

TopLogprobs top_logprobs(const float* logits, int64_t V, double temperature, int n) {
  TITAN_CHECK(temperature > 0, "top_logprobs: temperature must be > 0, got {}", temperature);
  const float inv_t = static_cast<float>(1.0 / temperature);
  const kc::VocabStats st = kc::vocab_row_stats(logits, V, inv_t);
  const int64_t k = std::min<int64_t>(n, V);
  std::vector<int32_t> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [logits](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  TopLogprobs out;
  out.reserve(k);
  for (int64_t i = 0; i < k; ++i)
    out.emplace_back(ids[i], kc::vocab_logprob(st, logits[ids[i]] * inv_t));
  return out;
}

}  // namespace titan::infer
