// Shared helpers for the attention kernel tests: random problems, a float64
// reference forward + analytic backward (full softmax, textbook definition), and
// runners for the packed and paged kernels.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "titan/kernels/cpu/attention.h"

namespace titan::kernels::cpu::testing {

struct Problem {
  int H = 4, Hkv = 2, Dh = 64;
  std::vector<int32_t> cu;  // cu_seqlens
  AttentionParams p;
  std::vector<float> sinks;  // empty = none
  std::vector<float> q, k, v, dout;
  int64_t T() const { return cu.back(); }
  int S() const { return static_cast<int>(cu.size()) - 1; }
  AttentionParams params() const {
    AttentionParams r = p;
    r.sinks = sinks.empty() ? nullptr : sinks.data();
    return r;
  }
  float scale() const { return p.scale > 0 ? p.scale : static_cast<float>(1.0 / std::sqrt(double(Dh))); }
};

inline std::vector<float> randn(size_t n, float stddev, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> x(n);
  for (auto& e : x) e = d(g);
  return x;
}

// q, k with stddev qk_std (peaky softmax when large), v and dout N(0, 1).
inline Problem make_problem(const std::vector<int>& lens, int H, int Hkv, int Dh,
                            AttentionParams p = {}, bool sinks = false, uint32_t seed = 1,
                            float qk_std = 1.0f) {
  Problem pb;
  pb.H = H;
  pb.Hkv = Hkv;
  pb.Dh = Dh;
  pb.p = p;
  pb.cu.push_back(0);
  for (int L : lens) pb.cu.push_back(pb.cu.back() + L);
  const size_t T = pb.T();
  pb.q = randn(T * H * Dh, qk_std, seed * 7 + 1);
  pb.k = randn(T * Hkv * Dh, qk_std, seed * 7 + 2);
  pb.v = randn(T * Hkv * Dh, 1.0f, seed * 7 + 3);
  pb.dout = randn(T * H * Dh, 1.0f, seed * 7 + 4);
  if (sinks) pb.sinks = randn(H, 1.5f, seed * 7 + 5);
  return pb;
}

struct RefResult {
  std::vector<double> out, lse, dq, dk, dv, dsinks;
};

// Float64 reference: full softmax per (sequence, query head, query), then the
// analytic backward for the loss sum(dout * out). Inputs in double so finite
// differences can perturb them.
inline RefResult reference(const Problem& pb, const std::vector<double>& q,
                           const std::vector<double>& k, const std::vector<double>& v,
                           const std::vector<double>& sinks) {
  const int H = pb.H, Hkv = pb.Hkv, Dh = pb.Dh, G = H / Hkv;
  const int64_t T = pb.T();
  const double scale = pb.scale(), cap = pb.p.softcap;
  const int W = pb.p.window;
  RefResult r;
  r.out.assign(T * H * Dh, 0.0);
  r.lse.assign(T * H, 0.0);
  r.dq.assign(T * H * Dh, 0.0);
  r.dk.assign(T * Hkv * Dh, 0.0);
  r.dv.assign(T * Hkv * Dh, 0.0);
  r.dsinks.assign(H, 0.0);
  std::vector<double> s, th, P, dp;
  for (int sq = 0; sq < pb.S(); ++sq) {
    const int64_t t0 = pb.cu[sq];
    const int L = pb.cu[sq + 1] - pb.cu[sq];
    for (int h = 0; h < H; ++h) {
      const int hk = h / G;
      for (int i = 0; i < L; ++i) {
        const int lo = W > 0 ? std::max(0, i - W + 1) : 0;
        const int n = i - lo + 1;
        s.assign(n, 0.0);
        th.assign(n, 0.0);
        const double* qi = &q[((t0 + i) * H + h) * Dh];
        for (int jj = 0; jj < n; ++jj) {
          const double* kj = &k[((t0 + lo + jj) * Hkv + hk) * Dh];
          double acc = 0;
          for (int d = 0; d < Dh; ++d) acc += qi[d] * kj[d];
          acc *= scale;
          if (cap > 0) {
            th[jj] = std::tanh(acc / cap);
            acc = cap * th[jj];
          }
          s[jj] = acc;
        }
        double m = *std::max_element(s.begin(), s.end());
        if (!sinks.empty()) m = std::max(m, sinks[h]);
        double z = 0;
        for (double x : s) z += std::exp(x - m);
        if (!sinks.empty()) z += std::exp(sinks[h] - m);
        const double lse = m + std::log(z);
        r.lse[(t0 + i) * H + h] = lse;
        P.assign(n, 0.0);
        double* o = &r.out[((t0 + i) * H + h) * Dh];
        for (int jj = 0; jj < n; ++jj) {
          P[jj] = std::exp(s[jj] - lse);
          const double* vj = &v[((t0 + lo + jj) * Hkv + hk) * Dh];
          for (int d = 0; d < Dh; ++d) o[d] += P[jj] * vj[d];
        }
        if (pb.dout.empty()) continue;
        const float* dO = &pb.dout[((t0 + i) * H + h) * Dh];
        double D = 0;
        for (int d = 0; d < Dh; ++d) D += dO[d] * o[d];
        if (!sinks.empty()) r.dsinks[h] -= std::exp(sinks[h] - lse) * D;
        double* dqi = &r.dq[((t0 + i) * H + h) * Dh];
        for (int jj = 0; jj < n; ++jj) {
          const int64_t kr = ((t0 + lo + jj) * Hkv + hk) * Dh;
          double dpj = 0;
          for (int d = 0; d < Dh; ++d) dpj += dO[d] * v[kr + d];
          double ds = P[jj] * (dpj - D);
          if (cap > 0) ds *= 1.0 - th[jj] * th[jj];
          ds *= scale;
          for (int d = 0; d < Dh; ++d) {
            dqi[d] += ds * k[kr + d];
            r.dk[kr + d] += ds * qi[d];
            r.dv[kr + d] += P[jj] * dO[d];
          }
        }
      }
    }
  }
  return r;
}

inline std::vector<double> to_double(const std::vector<float>& x) { return {x.begin(), x.end()}; }

inline RefResult reference(const Problem& pb) {
  return reference(pb, to_double(pb.q), to_double(pb.k), to_double(pb.v), to_double(pb.sinks));
}

struct FwdResult {
  std::vector<float> out, lse;
};
struct BwdResult {
  std::vector<float> dq, dk, dv, dsinks;
};

inline FwdResult run_fwd(const Problem& pb, int block_size = kKvBlockSize) {
  FwdResult r;
  r.out.assign(pb.T() * pb.H * pb.Dh, 0.0f);
  r.lse.assign(pb.T() * pb.H, 0.0f);
  AttentionParams p = pb.params();
  p.block_size = block_size;
  attention_varlen_fwd(r.out.data(), r.lse.data(), pb.q.data(), pb.k.data(), pb.v.data(),
                       pb.cu.data(), pb.S(), pb.T(), pb.H, pb.Hkv, pb.Dh, p);
  return r;
}

inline BwdResult run_bwd(const Problem& pb, const FwdResult& f, int block_size = kKvBlockSize) {
  BwdResult r;
  r.dq.assign(pb.q.size(), 0.0f);
  r.dk.assign(pb.k.size(), 0.0f);
  r.dv.assign(pb.v.size(), 0.0f);
  r.dsinks.assign(pb.H, 0.0f);
  AttentionParams p = pb.params();
  p.block_size = block_size;
  attention_varlen_bwd(r.dq.data(), r.dk.data(), r.dv.data(), r.dsinks.data(), pb.dout.data(),
                       f.out.data(), f.lse.data(), pb.q.data(), pb.k.data(), pb.v.data(),
                       pb.cu.data(), pb.S(), pb.T(), pb.H, pb.Hkv, pb.Dh, p);
  return r;
}

// max |a - r| / max |r| (r the reference).
template <typename A, typename R>
double rel_err(const std::vector<A>& a, const std::vector<R>& r) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::abs(static_cast<double>(a[i]) - static_cast<double>(r[i])));
    den = std::max(den, std::abs(static_cast<double>(r[i])));
  }
  return den > 0 ? num / den : num;
}

inline double max_abs_diff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  return m;
}

// A paged KV cache for one layer, filled with NaN (unwritten slots must never leak
// into results), with a shuffled, non-contiguous block table per sequence.
struct PagedCache {
  int B = kKvBlockSize, Hkv = 0, Dh = 0, max_blocks = 0;
  int64_t num_blocks = 0;
  std::vector<float> kc, vc;
  std::vector<int32_t> tables;  // (num_seqs, max_blocks)
  PagedCache(int num_seqs, int max_len, int Hkv_, int Dh_, int B_, uint32_t seed)
      : B(B_), Hkv(Hkv_), Dh(Dh_) {
    max_blocks = (max_len + B - 1) / B;
    num_blocks = int64_t{num_seqs} * max_blocks + 5;
    kc.assign(num_blocks * Hkv * Dh * B, std::numeric_limits<float>::quiet_NaN());
    vc.assign(num_blocks * Hkv * B * Dh, std::numeric_limits<float>::quiet_NaN());
    std::vector<int32_t> phys(num_blocks);
    std::iota(phys.begin(), phys.end(), 0);
    std::shuffle(phys.begin(), phys.end(), std::mt19937(seed));
    tables.assign(phys.begin(), phys.begin() + int64_t{num_seqs} * max_blocks);
  }
  // Writes the K/V of tokens (seq s, positions pos[i]) taken from rows src[i] of (k, v).
  void write(const Problem& pb, const std::vector<int32_t>& seq, const std::vector<int32_t>& pos,
             const std::vector<int64_t>& src) {
    std::vector<float> k(src.size() * Hkv * Dh), v(k.size());
    std::vector<int64_t> slots(src.size());
    for (size_t i = 0; i < src.size(); ++i) {
      std::memcpy(&k[i * Hkv * Dh], &pb.k[src[i] * Hkv * Dh], sizeof(float) * Hkv * Dh);
      std::memcpy(&v[i * Hkv * Dh], &pb.v[src[i] * Hkv * Dh], sizeof(float) * Hkv * Dh);
      slots[i] = int64_t{tables[int64_t{seq[i]} * max_blocks + pos[i] / B]} * B + pos[i] % B;
    }
    kv_cache_write(kc.data(), vc.data(), k.data(), v.data(), slots.data(),
                   static_cast<int64_t>(src.size()), Hkv, Dh, num_blocks, B);
  }
  // Attends query rows src[i] of pb.q as (seq[i], pos[i]); returns out and lse rows.
  FwdResult attend(const Problem& pb, const std::vector<int32_t>& seq,
                   const std::vector<int32_t>& pos, const std::vector<int64_t>& src,
                   int num_seqs) {
    const int H = pb.H;
    const int64_t n = static_cast<int64_t>(src.size());
    std::vector<float> q(n * H * Dh);
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(&q[i * H * Dh], &pb.q[src[i] * H * Dh], sizeof(float) * H * Dh);
    FwdResult r;
    r.out.assign(n * H * Dh, 0.0f);
    r.lse.assign(n * H, 0.0f);
    AttentionParams p = pb.params();
    p.block_size = B;
    attention_paged_fwd(r.out.data(), r.lse.data(), q.data(), kc.data(), vc.data(), tables.data(),
                        seq.data(), pos.data(), n, H, Hkv, Dh, num_seqs, max_blocks, num_blocks, p);
    return r;
  }
};

}  // namespace titan::kernels::cpu::testing
