// Reductions with fixed summation orders (see reduce.h).
#include "titan/ops/reduce.h"

#include <cmath>
#include <limits>

#include "titan/ops/elementwise.h"
#include "titan/ops/index.h"
#include "titan/ops/op_util.h"

namespace titan {

using autograd::needs_grad;
using autograd::record_fn;
using namespace ops_detail;

namespace {

// Sum of x[0..n) with 8 lane accumulators and the fixed combining tree (reduce.h).
float chunk_sum(const float* x, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += x[i + l];
  for (int l = 0; i + l < n; ++l) acc[l] += x[i + l];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

float full_sum(const float* x, int64_t n) {
  const int64_t nc = (n + kSumChunk - 1) / kSumChunk;
  std::vector<float> part(nc);
  parallel_for_grain(nc, 4, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c)
      part[c] = chunk_sum(x + c * kSumChunk, std::min(kSumChunk, n - c * kSumChunk));
  });
  float s = 0.0f;
  for (int64_t c = 0; c < nc; ++c) s += part[c];
  return s;
}

Shape reduced_shape(const Shape& s, int64_t d, bool keepdim) {
  Shape r = s;
  if (keepdim) r[d] = 1;
  else r.erase(r.begin() + d);
  return r;
}

// out[o, i] = (Σ_k x[o, k, i], k ascending) * post. Parallel over (o, inner block).
void sum_dim_into(float* out, const float* x, DimSplit sp, float post, bool apply_post) {
  constexpr int64_t kBlk = 256;
  const int64_t nib = (sp.inner + kBlk - 1) / kBlk;
  parallel_for_grain(sp.outer * nib, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, sp.n * kBlk)),
                     [&](int64_t b, int64_t e) {
                       for (int64_t t = b; t < e; ++t) {
                         const int64_t o = t / nib, i0 = (t % nib) * kBlk;
                         const int64_t i1 = std::min(sp.inner, i0 + kBlk);
                         float* po = out + o * sp.inner;
                         const float* px = x + o * sp.n * sp.inner;
                         for (int64_t i = i0; i < i1; ++i) po[i] = 0.0f;
                         for (int64_t k = 0; k < sp.n; ++k)
                           for (int64_t i = i0; i < i1; ++i) po[i] += px[k * sp.inner + i];
                         if (apply_post)
                           for (int64_t i = i0; i < i1; ++i) po[i] = po[i] / post;
                       }
                     });
}

// Gradient of a dim reduction: g (reduced shape) broadcast back to `in`.
Tensor expand_back(const Tensor& g, const Shape& in, int64_t d, bool keepdim) {
  Tensor gk = keepdim ? g : g.unsqueeze(d);
  return gk.expand(in).contiguous();
}

Tensor sum_or_mean_dim(const char* op, const Tensor& x, int64_t dim, bool keepdim, bool is_mean) {
  check_dtype(op, "x", x, DType::f32);
  TITAN_CHECK(x.dim() > 0, "{}: cannot reduce dim {} of a 0-d tensor", op, dim);
  const int64_t d = wrap_dim(op, dim, x.dim());
  Tensor xc = contig(x);
  Tensor out = Tensor::empty(reduced_shape(x.shape(), d, keepdim));
  DimSplit sp = split_at(x.shape(), d);
  sum_dim_into(out.data<float>(), xc.data<float>(), sp, static_cast<float>(sp.n), is_mean);
  if (needs_grad({&x})) {
    Shape in = x.shape();
    const double n = static_cast<double>(sp.n);
    record_fn(is_mean ? "MeanDim" : "SumDim", {x}, {out},
              [in, d, keepdim, is_mean, n](const std::vector<Tensor>& g) {
                Tensor gx = expand_back(g[0], in, d, keepdim);
                return std::vector<Tensor>{is_mean ? scale(gx, 1.0 / n) : gx};
              });
  }
  return out;
}

// Index of the max of x[k * stride], k in [0, n): first NaN, else first maximal value.
inline int64_t argmax_strided(const float* x, int64_t n, int64_t stride) {
  int64_t best = 0;
  float bv = x[0];
  if (std::isnan(bv)) return 0;
  for (int64_t k = 1; k < n; ++k) {
    const float v = x[k * stride];
    if (std::isnan(v)) return k;
    if (v > bv) {
      bv = v;
      best = k;
    }
  }
  return best;
}

}  // namespace

Tensor sum(const Tensor& x) {
  check_dtype("sum", "x", x, DType::f32);
  Tensor xc = contig(x);
  Tensor out = Tensor::empty({});
  out.data<float>()[0] = full_sum(xc.data<float>(), xc.numel());
  if (needs_grad({&x})) {
    Shape in = x.shape();
    record_fn("Sum", {x}, {out}, [in](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{g[0].expand(in).contiguous()};
    });
  }
  return out;
}

Tensor mean(const Tensor& x) {
  check_dtype("mean", "x", x, DType::f32);
  Tensor xc = contig(x);
  Tensor out = Tensor::empty({});
  const int64_t n = xc.numel();
  out.data<float>()[0] = full_sum(xc.data<float>(), n) / static_cast<float>(n);
  if (needs_grad({&x})) {
    Shape in = x.shape();
    record_fn("Mean", {x}, {out}, [in, n](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{scale(g[0], 1.0 / static_cast<double>(n)).expand(in).contiguous()};
    });
  }
  return out;
}

Tensor sum(const Tensor& x, int64_t dim, bool keepdim) {
  return sum_or_mean_dim("sum", x, dim, keepdim, false);
}

Tensor mean(const Tensor& x, int64_t dim, bool keepdim) {
  return sum_or_mean_dim("mean", x, dim, keepdim, true);
}

Tensor max(const Tensor& x) {
  check_dtype("max", "x", x, DType::f32);
  TITAN_CHECK(x.numel() > 0, "max: argument 'x' is empty (shape {})", shape_str(x.shape()));
  Tensor xc = contig(x);
  const float* px = xc.data<float>();
  const int64_t idx = argmax_strided(px, xc.numel(), 1);
  Tensor out = Tensor::full({}, px[idx]);
  if (needs_grad({&x})) {
    Shape in = x.shape();
    record_fn("Max", {x}, {out}, [in, idx](const std::vector<Tensor>& g) {
      Tensor gx = Tensor::zeros(in);
      gx.data<float>()[idx] = g[0].item<float>();
      return std::vector<Tensor>{gx};
    });
  }
  return out;
}

MaxResult max(const Tensor& x, int64_t dim, bool keepdim) {
  check_dtype("max", "x", x, DType::f32);
  TITAN_CHECK(x.dim() > 0, "max: cannot reduce dim {} of a 0-d tensor", dim);
  const int64_t d = wrap_dim("max", dim, x.dim());
  TITAN_CHECK(x.shape()[d] > 0, "max: cannot reduce the empty dim {} of shape {}", d,
              shape_str(x.shape()));
  Tensor xc = contig(x);
  const Shape rs = reduced_shape(x.shape(), d, keepdim);
  Tensor vals = Tensor::empty(rs), idx = Tensor::empty(rs, DType::i64);
  const DimSplit sp = split_at(x.shape(), d);
  const float* px = xc.data<float>();
  float* pv = vals.data<float>();
  int64_t* pi = idx.data<int64_t>();
  parallel_elems(sp.outer * sp.inner, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / sp.inner, i = t % sp.inner;
      const float* row = px + o * sp.n * sp.inner + i;
      const int64_t k = argmax_strided(row, sp.n, sp.inner);
      pi[t] = k;
      pv[t] = row[k * sp.inner];
    }
  });
  if (needs_grad({&x})) {
    Shape in = x.shape();
    record_fn("MaxDim", {x}, {vals}, [in, d, keepdim, idx](const std::vector<Tensor>& g) {
      Tensor ik = keepdim ? idx : idx.unsqueeze(d);
      Tensor gk = keepdim ? g[0] : g[0].unsqueeze(d);
      return std::vector<Tensor>{scatter_add(Tensor::zeros(in), d, ik, gk)};
    });
  }
  return {vals, idx};
}

// logsumexp lives in softmax.cpp (it runs the softmax row kernels).

}  // namespace titan
