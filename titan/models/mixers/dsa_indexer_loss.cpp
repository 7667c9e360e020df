#include "titan/models/mixers/dsa_indexer_loss.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "titan/core/error.h"
#include "titan/core/thread_pool.h"

namespace titan::models {

namespace {

inline float dotf(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// softmax of z (n) in double, in place.
void softmax_inplace(std::vector<double>& z) {
  double m = -std::numeric_limits<double>::infinity();
  for (double v : z) m = std::max(m, v);
  double l = 0;
  for (double& v : z) l += (v = std::exp(v - m));
  for (double& v : z) v /= l;
}

}  // namespace

IndexerKL dsa_indexer_kl(const Tensor& q_, const Tensor& k_, double scale, const Tensor& qi_, const Tensor& ki_,
                         const Tensor& wi_, double iscale, const std::vector<int32_t>& start_of, bool sparse,
                         const Tensor& sel_, const Tensor& count_, double grad_scale) {
  const Tensor q = q_.contiguous(), k = k_.contiguous(), qi = qi_.contiguous(), ki = ki_.contiguous(),
               wi = wi_.contiguous();
  TITAN_CHECK(q.dim() == 3 && k.dim() == 3 && qi.dim() == 3 && ki.dim() == 2 && wi.dim() == 2,
              "dsa_indexer_kl: q, k (T, H, Dk), qi (T, Hi, Di), ki (T, Di), wi (T, Hi) expected, got {}, {}, {}, {}, {}",
              shape_str(q.shape()), shape_str(k.shape()), shape_str(qi.shape()), shape_str(ki.shape()),
              shape_str(wi.shape()));
  const int64_t T = q.size(0), H = q.size(1), Dk = q.size(2), Hi = qi.size(1), Di = qi.size(2);
  TITAN_CHECK(k.size(0) == T && k.size(1) == H && k.size(2) == Dk && qi.size(0) == T && ki.size(0) == T &&
                  ki.size(1) == Di && wi.size(0) == T && wi.size(1) == Hi &&
                  static_cast<int64_t>(start_of.size()) == T,
              "dsa_indexer_kl: q {}, k {}, qi {}, ki {}, wi {} and {} document starts do not agree",
              shape_str(q.shape()), shape_str(k.shape()), shape_str(qi.shape()), shape_str(ki.shape()),
              shape_str(wi.shape()), start_of.size());
  Tensor sel, count;
  int64_t S = 0;
  if (sparse) {
    sel = sel_.contiguous();
    count = count_.contiguous();
    TITAN_CHECK(sel.dim() == 2 && sel.size(0) == T && sel.dtype() == DType::i32 && count.dim() == 1 &&
                    count.size(0) == T && count.dtype() == DType::i32,
                "dsa_indexer_kl: sel (T = {}, S) and count (T) i32 expected, got {} and {}", T, shape_str(sel.shape()),
                shape_str(count.shape()));
    S = sel.size(1);
  }
  // Candidate set of query t: cand(t, j), j < n(t); its G entries start at off[t].
  const int32_t* sp = sparse ? sel.data<int32_t>() : nullptr;
  const int32_t* cp = sparse ? count.data<int32_t>() : nullptr;
  std::vector<int64_t> off(static_cast<size_t>(T + 1), 0);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t n = sparse ? cp[t] : t - start_of[static_cast<size_t>(t)] + 1;
    TITAN_CHECK(n >= 1 && (!sparse || n <= S), "dsa_indexer_kl: query {} has {} candidate keys", t, n);
    off[static_cast<size_t>(t + 1)] = off[static_cast<size_t>(t)] + n;
  }
  auto cand = [&](int64_t t, int64_t j) -> int64_t {
    const int64_t s = sparse ? sp[t * S + j] : start_of[static_cast<size_t>(t)] + j;
    return s;
  };
  for (int64_t t = 0; sparse && t < T; ++t)
    for (int64_t j = 0; j < cp[t]; ++j)
      TITAN_CHECK(cand(t, j) >= 0 && cand(t, j) <= t, "dsa_indexer_kl: sel[{}][{}] = {} is not a causal key", t, j,
                  cand(t, j));

  IndexerKL r;
  r.dqi = Tensor::zeros({T, Hi, Di});
  r.dki = Tensor::zeros({T, Di});
  r.dwi = Tensor::zeros({T, Hi});
  std::vector<double> kl(static_cast<size_t>(T));
  std::vector<float> G(static_cast<size_t>(off[static_cast<size_t>(T)]));  // grad_scale · (r - p)
  const float *qp = q.data<float>(), *kp = k.data<float>(), *qip = qi.data<float>(), *kip = ki.data<float>(),
              *wp = wi.data<float>();
  float *dqp = r.dqi.data<float>(), *dkp = r.dki.data<float>(), *dwp = r.dwi.data<float>();
  const float fis = static_cast<float>(iscale);
  // 1. Per query: p, r, KL_t, G and the gradients of its own q_I and w rows.
  parallel_for(T, [&](int64_t b, int64_t e) {
    std::vector<double> z, p, u;
    for (int64_t t = b; t < e; ++t) {
      const int64_t n = off[static_cast<size_t>(t + 1)] - off[static_cast<size_t>(t)];
      p.assign(static_cast<size_t>(n), 0.0);
      z.resize(static_cast<size_t>(n));
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t j = 0; j < n; ++j)
          z[static_cast<size_t>(j)] = scale * dotf(qp + (t * H + h) * Dk, kp + (cand(t, j) * H + h) * Dk, Dk);
        softmax_inplace(z);
        for (int64_t j = 0; j < n; ++j) p[static_cast<size_t>(j)] += z[static_cast<size_t>(j)] / static_cast<double>(H);
      }
      u.resize(static_cast<size_t>(n * Hi));
      for (int64_t j = 0; j < n; ++j) {
        double I = 0;
        for (int64_t h = 0; h < Hi; ++h) {
          const float uh = fis * dotf(qip + (t * Hi + h) * Di, kip + cand(t, j) * Di, Di);
          u[static_cast<size_t>(j * Hi + h)] = uh;
          if (uh > 0.0f) I += static_cast<double>(wp[t * Hi + h]) * uh;
        }
        z[static_cast<size_t>(j)] = I;
      }
      softmax_inplace(z);  // r
      double klt = 0;
      for (int64_t j = 0; j < n; ++j) {
        const double pj = p[static_cast<size_t>(j)], rj = z[static_cast<size_t>(j)];
        if (pj > 0) klt += pj * (std::log(pj) - std::log(std::max(rj, std::numeric_limits<double>::min())));
        const double g = grad_scale * (rj - pj);
        G[static_cast<size_t>(off[static_cast<size_t>(t)] + j)] = static_cast<float>(g);
        for (int64_t h = 0; h < Hi; ++h) {
          const double uh = u[static_cast<size_t>(j * Hi + h)];
          if (uh <= 0) continue;
          dwp[t * Hi + h] += static_cast<float>(g * uh);
          const float c = static_cast<float>(g * wp[t * Hi + h] * iscale);
          const float* kr = kip + cand(t, j) * Di;
          float* dq = dqp + (t * Hi + h) * Di;
          for (int64_t d = 0; d < Di; ++d) dq[d] += c * kr[d];
        }
      }
      kl[static_cast<size_t>(t)] = klt;
    }
  });
  for (double v : kl) r.kl_sum += v;
  // 2. The keys' gradients: key s gathers from the queries that hold it, in ascending t.
  std::vector<int64_t> head(static_cast<size_t>(T + 1), 0), entry(G.size());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < off[static_cast<size_t>(t + 1)] - off[static_cast<size_t>(t)]; ++j)
      ++head[static_cast<size_t>(cand(t, j) + 1)];
  for (int64_t s = 0; s < T; ++s) head[static_cast<size_t>(s + 1)] += head[static_cast<size_t>(s)];
  {
    std::vector<int64_t> fill(head.begin(), head.end() - 1);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < off[static_cast<size_t>(t + 1)] - off[static_cast<size_t>(t)]; ++j)
        entry[static_cast<size_t>(fill[static_cast<size_t>(cand(t, j))]++)] = off[static_cast<size_t>(t)] + j;
  }
  std::vector<int32_t> query_of(G.size());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = off[static_cast<size_t>(t)]; i < off[static_cast<size_t>(t + 1)]; ++i)
      query_of[static_cast<size_t>(i)] = static_cast<int32_t>(t);
  parallel_for(T, [&](int64_t b, int64_t e) {
    for (int64_t s = b; s < e; ++s) {
      const float* kr = kip + s * Di;
      float* dk = dkp + s * Di;
      for (int64_t x = head[static_cast<size_t>(s)]; x < head[static_cast<size_t>(s + 1)]; ++x) {
        const int64_t gi = entry[static_cast<size_t>(x)], t = query_of[static_cast<size_t>(gi)];
        const double g = G[static_cast<size_t>(gi)];
        for (int64_t h = 0; h < Hi; ++h) {
          const float* qr = qip + (t * Hi + h) * Di;
          if (fis * dotf(qr, kr, Di) <= 0.0f) continue;
          const float c = static_cast<float>(g * wp[t * Hi + h] * iscale);
          for (int64_t d = 0; d < Di; ++d) dk[d] += c * qr[d];
        }
      }
    }
  });
  return r;
}

}  // namespace titan::models
