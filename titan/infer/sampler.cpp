#include "titan/infer/sampler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
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

// Blocked running sums over the sequence v_i = p[ids[i]] (ids null: p[i]), i < n:
// the sequence is cut into blocks of kSumBlock, s_i = sequential double sum of v
// from the start of i's block to i, A_k = sequential sum of the previous blocks'
// totals; the running sum at i is r_i = A_k + s_i. Blocks are summed four at a time
// (independent chains), so the pass runs at add throughput, not latency; r_i is
// non-decreasing in i (v >= 0) and the same for any n > i.
constexpr int64_t kSumBlock = 64;

inline float value(const float* p, const int32_t* ids, int64_t i) { return p[ids ? ids[i] : i]; }

void block_sums(const float* p, const int32_t* ids, int64_t n, std::vector<double>& bs) {
  const int64_t nb = (n + kSumBlock - 1) / kSumBlock;
  bs.assign(static_cast<size_t>(nb), 0.0);
  int64_t k = 0;
  for (; k + 4 <= nb && (k + 4) * kSumBlock <= n; k += 4) {
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    const int64_t b = k * kSumBlock;
    for (int64_t j = 0; j < kSumBlock; ++j) {
      a0 += value(p, ids, b + j);
      a1 += value(p, ids, b + kSumBlock + j);
      a2 += value(p, ids, b + 2 * kSumBlock + j);
      a3 += value(p, ids, b + 3 * kSumBlock + j);
    }
    bs[k] = a0, bs[k + 1] = a1, bs[k + 2] = a2, bs[k + 3] = a3;
  }
  for (; k < nb; ++k) {
    double a = 0;
    for (int64_t i = k * kSumBlock; i < std::min(n, (k + 1) * kSumBlock); ++i) a += value(p, ids, i);
    bs[k] = a;
  }
}

// r_{n-1}: the total of the sequence.
double blocked_total(const std::vector<double>& bs) {
  double a = 0;
  for (double b : bs) a += b;
  return a;
}

// The first i < n with r_i > target (strict) or r_i >= target; -1 if none.
int64_t first_reaching(const float* p, const int32_t* ids, int64_t n, const std::vector<double>& bs,
                       double target, bool strict) {
  auto reached = [&](double r) { return strict ? r > target : r >= target; };
  double A = 0;
  for (size_t k = 0; k < bs.size(); ++k) {
    if (reached(A + bs[k])) {
      double sblk = 0;
      const int64_t end = std::min(n, static_cast<int64_t>(k + 1) * kSumBlock);
      for (int64_t i = static_cast<int64_t>(k) * kSumBlock; i < end; ++i) {
        sblk += value(p, ids, i);
        if (reached(A + sblk)) return i;
      }
    }
    A += bs[k];
  }
  return -1;
}

// Inverse CDF over v_0..v_{n-1}: the first i with r_i > u · r_{n-1} (u in [0, 1)).
int32_t draw(const float* p, const int32_t* ids, int64_t n, double u, std::vector<double>& bs) {
  block_sums(p, ids, n, bs);
  int64_t i = first_reaching(p, ids, n, bs, u * blocked_total(bs), /*strict=*/true);
  if (i < 0) {  // u · total rounded up to total: the last token with p > 0
    i = n - 1;
    while (i > 0 && value(p, ids, i) <= 0) --i;
  }
  return ids ? ids[i] : static_cast<int32_t>(i);
}

// Stable LSD radix sort of ids by p descending (ties keep their order: ids ascending
// when ids come in ascending order) — the order of `better` in sample_token. p >= 0,
// so the float bits order like the values.
void sort_by_prob_desc(const float* p, std::vector<int32_t>& ids, std::vector<int32_t>& tmp,
                       std::vector<uint32_t>& keys, std::vector<uint32_t>& ktmp) {
  const size_t n = ids.size();
  tmp.resize(n);
  keys.resize(n);
  ktmp.resize(n);
  for (size_t i = 0; i < n; ++i) {  // ~bits: ascending keys = descending p
    uint32_t b;
    std::memcpy(&b, &p[ids[i]], 4);
    keys[i] = ~b;
  }
  for (int shift = 0; shift < 32; shift += 11) {
    std::array<uint32_t, 2049> count{};
    for (size_t i = 0; i < n; ++i) ++count[((keys[i] >> shift) & 2047u) + 1];
    for (size_t d = 1; d < count.size(); ++d) count[d] += count[d - 1];
    for (size_t i = 0; i < n; ++i) {
      const uint32_t at = count[(keys[i] >> shift) & 2047u]++;
      tmp[at] = ids[i];
      ktmp[at] = keys[i];
    }
    ids.swap(tmp);
    keys.swap(ktmp);
  }
}

}  // namespace

int32_t sample_token(const float* logits, int64_t V, const SamplingParams& sp, uint64_t seed,
                     int sample_index, int64_t position, SamplerScratch& s) {
  TITAN_CHECK(V >= 1, "sample_token: V must be >= 1, got {}", V);
  if (sp.greedy()) return argmax(logits, V);
  const float inv_t = static_cast<float>(1.0 / sp.temperature);
  s.z.resize(V);
  s.p.resize(V);
  {
    float* __restrict z = s.z.data();
    const float* __restrict x = logits;
    for (int64_t j = 0; j < V; ++j) z[j] = x[j] * inv_t;
  }
  kc::softmax_fwd(s.p.data(), s.z.data(), 1, V);
  const float* p = s.p.data();
  const double u = philox_uniform(seed, static_cast<uint64_t>(position), static_cast<uint64_t>(sample_index));

  const bool m_on = sp.min_p > 0, k_on = sp.top_k > 0 && sp.top_k < V, p_on = sp.top_p < 1.0;
  if (!m_on && !k_on && !p_on) return draw(p, nullptr, V, u, s.sums);

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
  if (!p_on) return draw(p, cand.data(), keep, u, s.sums);  // min-p only: id order; top-k: sorted
  // top-p over the first `keep` candidates: their mass (id order; top-k: sorted order),
  // then the cut = 1 + the first i of the sorted order with r_i >= top_p · mass.
  block_sums(p, cand.data(), keep, s.sums);
  const double goal = sp.top_p * blocked_total(s.sums);
  // Sort a growing prefix until its running sum reaches the goal (peaked rows stop
  // early; no prefix of m tokens holds more than m · max p, so start there); past
  // kFullSortFrom the whole set is radix-sorted once. The order, and so the cut, is
  // the same whatever was sorted.
  constexpr int64_t kFullSortFrom = 1024;
  float pm[4] = {0, 0, 0, 0};
  for (int64_t i = 0; i < keep; ++i) pm[i & 3] = std::max(pm[i & 3], p[cand[i]]);
  const float pmax = std::max(std::max(pm[0], pm[1]), std::max(pm[2], pm[3]));
  const double lower = pmax > 0 ? std::min(std::floor(goal / pmax), 1e12) : static_cast<double>(keep);
  int64_t m = std::min<int64_t>(keep, std::max<int64_t>(64, static_cast<int64_t>(lower))), cut = keep;
  if (!k_on) s.ids = cand;  // id order, for the stable full sort
  for (;;) {
    if (!k_on) {
      if (m >= kFullSortFrom) {
        m = keep;
        cand.swap(s.ids);
        sort_by_prob_desc(p, cand, s.tmp, s.keys, s.ktmp);
      } else {
        std::partial_sort(cand.begin(), cand.begin() + m, cand.end(), better);
      }
    }
    block_sums(p, cand.data(), m, s.sums);
    const int64_t i = first_reaching(p, cand.data(), m, s.sums, goal, /*strict=*/false);
    if (i >= 0) {
      cut = i + 1;
      break;
    }
    if (m == keep) break;  // rounding: the whole set
    m = std::min<int64_t>(keep, m * 4);
  }
  return draw(p, cand.data(), cut, u, s.sums);
}

TopLogprobs top_logprobs(const float* logits, int64_t V, double temperature, int n, int64_t candidates) {
  TITAN_CHECK(temperature > 0, "top_logprobs: temperature must be > 0, got {}", temperature);
  const int64_t C = candidates < 0 ? V : candidates;
  TITAN_CHECK(C >= 1 && C <= V, "top_logprobs: candidates must be in [1, {}], got {}", V, candidates);
  const float inv_t = static_cast<float>(1.0 / temperature);
  const kc::VocabStats st = kc::vocab_row_stats(logits, V, inv_t);
  const int64_t k = std::min<int64_t>(n, C);
  std::vector<int32_t> ids(C);
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
