// Indexing ops: embedding, index_select, gather, scatter_add, topk, argmax.
#include "titan/ops/index.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "titan/ops/op_util.h"

namespace titan {

using autograd::needs_grad;
using autograd::record_fn;
using namespace ops_detail;

namespace {

void check_range(const char* op, const char* arg, const std::vector<int64_t>& v, int64_t n,
                 const char* what) {
  for (size_t i = 0; i < v.size(); ++i)
    TITAN_CHECK(v[i] >= 0 && v[i] < n, "{}: {}[{}] = {} is out of range for {} = {}", op, arg, i,
                v[i], what, n);
}

// The lines of a gather/scatter: every coordinate tuple of index's shape without
// `dim`. For line l, a_base/b_base are the offsets (in elements, contiguous layouts
// of shapes sa/sb) of the line's first element with coordinate dim = 0.
struct Lines {
  int64_t count = 0, len = 0;
  std::vector<int64_t> a_base, b_base;
};
Lines lines_of(const Shape& si, int64_t dim, const Shape& sa, const Shape& sb) {
  Lines L;
  const int64_t nd = static_cast<int64_t>(si.size());
  L.len = si[dim];
  const int64_t n = shape_numel(si);
  if (n == 0) return L;
  L.count = n / L.len;
  const Shape sta = contiguous_strides(sa), stb = contiguous_strides(sb);
  std::vector<int64_t> c(nd, 0);
  L.a_base.reserve(L.count);
  L.b_base.reserve(L.count);
  for (int64_t l = 0; l < L.count; ++l) {
    int64_t oa = 0, ob = 0;
    for (int64_t e = 0; e < nd; ++e) {
      oa += c[e] * sta[e];
      ob += c[e] * stb[e];
    }
    L.a_base.push_back(oa);
    L.b_base.push_back(ob);
    for (int64_t e = nd - 1; e >= 0; --e) {
      if (e == dim) continue;
      if (++c[e] < si[e]) break;
      c[e] = 0;
    }
  }
  return L;
}

void check_gather_shapes(const char* op, const Tensor& index, int64_t d, const Tensor& x,
                         const char* xname, bool include_dim) {
  TITAN_CHECK(index.dim() == x.dim(), "{}: 'index' has rank {} but '{}' has rank {} (shapes {} vs {})",
              op, index.dim(), xname, x.dim(), shape_str(index.shape()), shape_str(x.shape()));
  for (int64_t e = 0; e < x.dim(); ++e)
    TITAN_CHECK((e == d && !include_dim) || index.shape()[e] <= x.shape()[e],
                "{}: index.size({}) = {} exceeds {}.size({}) = {} (shapes {} vs {})", op, e,
                index.shape()[e], xname, e, x.shape()[e], shape_str(index.shape()),
                shape_str(x.shape()));
}

// Row-major-first comparison for topk: NaN largest, ties to the lower index.
inline bool topk_before(float va, int64_t ia, float vb, int64_t ib) {
  const bool na = std::isnan(va), nb = std::isnan(vb);
  if (na != nb) return na;
  if (!na && va != vb) return va > vb;
  return ia < ib;
}

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  check_f32_or_bf16("embedding", "weight", weight);
  check_dim("embedding", "weight", weight, 2);
  check_index("embedding", "ids", ids);
  const int64_t V = weight.size(0), D = weight.size(1);
  std::vector<int64_t> id = index_values(ids);
  for (size_t t = 0; t < id.size(); ++t)
    TITAN_CHECK(id[t] >= 0 && id[t] < V,
                "embedding: token id {} at position {} is out of range for vocabulary size V = {}",
                id[t], t, V);
  Shape os = ids.shape();
  os.push_back(D);
  Tensor out = Tensor::empty(os);
  Tensor wc = contig(weight);
  float* po = out.data<float>();
  const int64_t T = static_cast<int64_t>(id.size());
  if (wc.dtype() == DType::f32) {
    const float* pw = wc.data<float>();
    parallel_for_grain(T, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, D)), [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) std::memcpy(po + t * D, pw + id[t] * D, D * 4);
    });
  } else {
    const uint16_t* pw = wc.data<uint16_t>();
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < D; ++j) po[t * D + j] = bf16_to_f32(pw[id[t] * D + j]);
  }
  if (needs_grad({&weight})) {
    record_fn("Embedding", {weight}, {out}, [id = std::move(id), V, D](const std::vector<Tensor>& g) {
      Tensor gc = contig(g[0]);
      Tensor dw = Tensor::zeros({V, D});
      const float* pg = gc.data<float>();
      float* pd = dw.data<float>();
      const int64_t T = static_cast<int64_t>(id.size());
      // Threads own column ranges; every row is accumulated in token order.
      parallel_for_grain(D, 64, [&](int64_t c0, int64_t c1) {
        for (int64_t t = 0; t < T; ++t) {
          float* dst = pd + id[t] * D;
          const float* src = pg + t * D;
          for (int64_t j = c0; j < c1; ++j) dst[j] += src[j];
        }
      });
      return std::vector<Tensor>{dw};
    });
  }
  return out;
}

Tensor embedding_panels(const Tensor& panels, int64_t num_embeddings, const Tensor& ids) {
  const int64_t D = check_panels("embedding_panels", panels, num_embeddings, {&panels});
  check_index("embedding_panels", "ids", ids);
  const int64_t V = num_embeddings, pw = kernels::cpu::gemm_panel_width();
  std::vector<int64_t> id = index_values(ids);
  for (size_t t = 0; t < id.size(); ++t)
    TITAN_CHECK(id[t] >= 0 && id[t] < V,
                "embedding_panels: token id {} at position {} is out of range for vocabulary "
                "size V = {}",
                id[t], t, V);
  Shape os = ids.shape();
  os.push_back(D);
  Tensor out = Tensor::empty(os);
  float* po = out.data<float>();
  const float* pp = panels.data<float>();
  const int64_t T = static_cast<int64_t>(id.size());
  // Row v is column v % w of panel v / w: element (v, k) at (v / w)·D·w + k·w + v % w.
  parallel_for_grain(T, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, D)),
                     [&](int64_t b, int64_t e) {
                       for (int64_t t = b; t < e; ++t) {
                         const float* src = pp + (id[t] / pw) * D * pw + id[t] % pw;
                         for (int64_t k = 0; k < D; ++k) po[t * D + k] = src[k * pw];
                       }
                     });
  return out;
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  check_defined("index_select", "x", x);
  check_index("index_select", "index", index);
  check_dim("index_select", "index", index, 1);
  TITAN_CHECK(x.dim() > 0, "index_select: 'x' must have at least one dim");
  const int64_t d = wrap_dim("index_select", dim, x.dim());
  std::vector<int64_t> idx = index_values(index);
  check_range("index_select", "index", idx, x.shape()[d], "x.size(dim)");
  Tensor xc = contig(x);
  Shape os = x.shape();
  os[d] = static_cast<int64_t>(idx.size());
  Tensor out = Tensor::empty(os, x.dtype());
  const DimSplit sp = split_at(x.shape(), d);
  const int64_t L = static_cast<int64_t>(idx.size());
  const size_t es = dtype_size(x.dtype());
  const char* px = static_cast<const char*>(xc.data_ptr());
  char* po = static_cast<char*>(out.data_ptr());
  for (int64_t o = 0; o < sp.outer; ++o)
    for (int64_t j = 0; j < L; ++j)
      std::memcpy(po + ((o * L + j) * sp.inner) * es, px + ((o * sp.n + idx[j]) * sp.inner) * es,
                  sp.inner * es);
  if (needs_grad({&x})) {
    record_fn("IndexSelect", {x}, {out}, [idx = std::move(idx), sp, in = x.shape()](const std::vector<Tensor>& g) {
      Tensor gc = contig(g[0]);
      Tensor dx = Tensor::zeros(in);
      const float* pg = gc.data<float>();
      float* pd = dx.data<float>();
      const int64_t L = static_cast<int64_t>(idx.size());
      parallel_for_grain(sp.outer, 1, [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o)
          for (int64_t j = 0; j < L; ++j) {  // index order
            float* dst = pd + (o * sp.n + idx[j]) * sp.inner;
            const float* src = pg + (o * L + j) * sp.inner;
            for (int64_t i = 0; i < sp.inner; ++i) dst[i] += src[i];
          }
      });
      return std::vector<Tensor>{dx};
    });
  }
  return out;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  check_dtype("gather", "x", x, DType::f32);
  check_index("gather", "index", index);
  TITAN_CHECK(x.dim() > 0, "gather: 'x' must have at least one dim");
  const int64_t d = wrap_dim("gather", dim, x.dim());
  check_gather_shapes("gather", index, d, x, "x", false);
  std::vector<int64_t> idx = index_values(index);
  check_range("gather", "index", idx, x.shape()[d], "x.size(dim)");
  Tensor xc = contig(x);
  Tensor out = Tensor::empty(index.shape());
  const Lines L = lines_of(index.shape(), d, index.shape(), x.shape());
  const int64_t si = contiguous_strides(index.shape())[d], sx = contiguous_strides(x.shape())[d];
  const float* px = xc.data<float>();
  float* po = out.data<float>();
  parallel_for_grain(L.count, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, L.len)), [&](int64_t b, int64_t e) {
    for (int64_t l = b; l < e; ++l)
      for (int64_t k = 0; k < L.len; ++k) {
        const int64_t p = L.a_base[l] + k * si;
        po[p] = px[L.b_base[l] + idx[p] * sx];
      }
  });
  if (needs_grad({&x})) {
    record_fn("Gather", {x}, {out}, [index = contig(index), d, in = x.shape()](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{scatter_add(Tensor::zeros(in), d, index, g[0])};
    });
  }
  return out;
}

Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  check_dtype("scatter_add", "self", self, DType::f32);
  check_dtype("scatter_add", "src", src, DType::f32);
  check_index("scatter_add", "index", index);
  TITAN_CHECK(self.dim() > 0, "scatter_add: 'self' must have at least one dim");
  const int64_t d = wrap_dim("scatter_add", dim, self.dim());
  check_gather_shapes("scatter_add", index, d, self, "self", false);
  check_gather_shapes("scatter_add", index, d, src, "src", true);
  std::vector<int64_t> idx = index_values(index);
  check_range("scatter_add", "index", idx, self.shape()[d], "self.size(dim)");
  Tensor out;
  {
    autograd::NoGradGuard ng;
    out = self.clone();
  }
  Tensor sc = contig(src);
  // Lines over index; a = index/src-in-index-layout is not src's layout, so use three bases.
  const Lines Li = lines_of(index.shape(), d, index.shape(), src.shape());
  const Lines Lo = lines_of(index.shape(), d, index.shape(), self.shape());
  const int64_t si = contiguous_strides(index.shape())[d];
  const int64_t ss = contiguous_strides(src.shape())[d], so = contiguous_strides(self.shape())[d];
  const float* ps = sc.data<float>();
  float* po = out.data<float>();
  // Different lines write different output lines: parallel over lines, k ascending within.
  parallel_for_grain(Li.count, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, Li.len)),
                     [&](int64_t l0, int64_t l1) {
                       for (int64_t l = l0; l < l1; ++l)
                         for (int64_t k = 0; k < Li.len; ++k) {
                           const int64_t p = Li.a_base[l] + k * si;
                           po[Lo.b_base[l] + idx[p] * so] += ps[Li.b_base[l] + k * ss];
                         }
                     });
  if (needs_grad({&self, &src})) {
    const bool gs = src.requires_grad();
    record_fn("ScatterAdd", {self, src}, {out},
              [index = contig(index), d, gs, src_shape = src.shape()](const std::vector<Tensor>& g) {
                Tensor dsrc;
                if (gs) {
                  dsrc = gather(g[0], d, index);
                  if (dsrc.shape() != src_shape) {  // index smaller than src: zero elsewhere
                    Tensor z = Tensor::zeros(src_shape);
                    Tensor view = z;
                    for (int64_t e = 0; e < z.dim(); ++e) view = view.narrow(e, 0, index.shape()[e]);
                    view.copy_(dsrc);
                    dsrc = z;
                  }
                }
                return std::vector<Tensor>{g[0], dsrc};
              });
  }
  return out;
}

TopKResult topk(const Tensor& x, int64_t k) {
  check_dtype("topk", "x", x, DType::f32);
  TITAN_CHECK(x.dim() > 0, "topk: 'x' must have at least one dim");
  const int64_t n = x.shape().back();
  TITAN_CHECK(k >= 0 && k <= n, "topk: k = {} out of range for last dim of size {}", k, n);
  Tensor xc = contig(x);
  Shape os = x.shape();
  os.back() = k;
  Tensor vals = Tensor::empty(os), idx = Tensor::empty(os, DType::i64);
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  const float* px = xc.data<float>();
  float* pv = vals.data<float>();
  int64_t* pi = idx.data<int64_t>();
  parallel_for_grain(rows, 1, [&](int64_t r0, int64_t r1) {
    std::vector<int64_t> order(n);
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = px + r * n;
      std::iota(order.begin(), order.end(), int64_t{0});
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [row](int64_t a, int64_t b) {
        return topk_before(row[a], a, row[b], b);
      });
      for (int64_t j = 0; j < k; ++j) {
        pi[r * k + j] = order[j];
        pv[r * k + j] = row[order[j]];
      }
    }
  });
  if (needs_grad({&x})) {
    record_fn("TopK", {x}, {vals}, [idx, in = x.shape()](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{scatter_add(Tensor::zeros(in), -1, idx, g[0])};
    });
  }
  return {vals, idx};
}

Tensor argmax(const Tensor& x) {
  check_dtype("argmax", "x", x, DType::f32);
  TITAN_CHECK(x.numel() > 0, "argmax: argument 'x' is empty (shape {})", shape_str(x.shape()));
  autograd::NoGradGuard ng;
  return argmax(x.reshape({-1}), 0, false);
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  check_dtype("argmax", "x", x, DType::f32);
  TITAN_CHECK(x.dim() > 0, "argmax: cannot reduce dim {} of a 0-d tensor", dim);
  const int64_t d = wrap_dim("argmax", dim, x.dim());
  TITAN_CHECK(x.shape()[d] > 0, "argmax: cannot reduce the empty dim {} of shape {}", d,
              shape_str(x.shape()));
  Tensor xc = contig(x);
  Shape os = x.shape();
  if (keepdim) os[d] = 1;
  else os.erase(os.begin() + d);
  Tensor out = Tensor::empty(os, DType::i64);
  const DimSplit sp = split_at(x.shape(), d);
  const float* px = xc.data<float>();
  int64_t* po = out.data<int64_t>();
  for (int64_t t = 0; t < sp.outer * sp.inner; ++t) {
    const float* row = px + (t / sp.inner) * sp.n * sp.inner + t % sp.inner;
    int64_t best = 0;
    for (int64_t k = 1; k < sp.n && !std::isnan(row[best * sp.inner]); ++k) {
      const float v = row[k * sp.inner];
      if (std::isnan(v) || v > row[best * sp.inner]) best = k;
    }
    po[t] = best;
  }
  return out;
}

}  // namespace titan
