// cat / stack / split / chunk.
#include "titan/ops/join.h"

#include "titan/ops/op_util.h"

namespace titan {

using autograd::needs_grad;
using autograd::record_fn;
using namespace ops_detail;

Tensor cat(const std::vector<Tensor>& ts, int64_t dim) {
  TITAN_CHECK(!ts.empty(), "cat: expected a non-empty list of tensors");
  for (size_t i = 0; i < ts.size(); ++i)
    TITAN_CHECK(ts[i].defined(), "cat: tensors[{}] is undefined", i);
  const Tensor& t0 = ts[0];
  TITAN_CHECK(t0.dim() > 0, "cat: tensors must have at least one dim, tensors[0] is 0-d");
  const int64_t d = wrap_dim("cat", dim, t0.dim());
  Shape os = t0.shape();
  os[d] = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    TITAN_CHECK(t.dtype() == t0.dtype(), "cat: tensors[{}] has dtype {} but tensors[0] has {}", i,
                dtype_name(t.dtype()), dtype_name(t0.dtype()));
    TITAN_CHECK(t.dim() == t0.dim(), "cat: tensors[{}] has shape {} but tensors[0] has shape {}", i,
                shape_str(t.shape()), shape_str(t0.shape()));
    for (int64_t e = 0; e < t.dim(); ++e)
      TITAN_CHECK(e == d || t.shape()[e] == t0.shape()[e],
                  "cat: tensors[{}] has shape {} but tensors[0] has shape {} (must match except in "
                  "dim {})",
                  i, shape_str(t.shape()), shape_str(t0.shape()), d);
    os[d] += t.shape()[d];
  }
  Tensor out = Tensor::empty(os, t0.dtype());
  std::vector<int64_t> offs;
  {
    autograd::NoGradGuard ng;
    int64_t off = 0;
    for (auto& t : ts) {
      offs.push_back(off);
      if (t.shape()[d] > 0) out.narrow(d, off, t.shape()[d]).copy_(t);
      off += t.shape()[d];
    }
  }
  if (needs_grad(ts)) {
    std::vector<int64_t> lens;
    std::vector<bool> want;
    for (auto& t : ts) {
      lens.push_back(t.shape()[d]);
      want.push_back(t.requires_grad());
    }
    record_fn("Cat", ts, {out}, [d, offs, lens, want](const std::vector<Tensor>& g) {
      std::vector<Tensor> r(offs.size());
      for (size_t i = 0; i < offs.size(); ++i)
        if (want[i]) r[i] = g[0].narrow(d, offs[i], lens[i]);
      return r;
    });
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& ts, int64_t dim) {
  TITAN_CHECK(!ts.empty(), "stack: expected a non-empty list of tensors");
  for (size_t i = 0; i < ts.size(); ++i) {
    TITAN_CHECK(ts[i].defined(), "stack: tensors[{}] is undefined", i);
    TITAN_CHECK(ts[i].shape() == ts[0].shape(),
                "stack: tensors[{}] has shape {} but tensors[0] has shape {}", i,
                shape_str(ts[i].shape()), shape_str(ts[0].shape()));
  }
  const int64_t d = wrap_dim("stack", dim, ts[0].dim() + 1);
  std::vector<Tensor> u;
  u.reserve(ts.size());
  for (auto& t : ts) u.push_back(t.unsqueeze(d));
  return cat(u, d);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  check_defined("split", "x", x);
  TITAN_CHECK(x.dim() > 0, "split: 'x' must have at least one dim");
  const int64_t d = wrap_dim("split", dim, x.dim());
  int64_t total = 0;
  for (auto s : sizes) {
    TITAN_CHECK(s >= 0, "split: negative size {} in sizes {}", s, shape_str(sizes));
    total += s;
  }
  TITAN_CHECK(total == x.shape()[d], "split: sizes {} sum to {} but x.size({}) = {}",
              shape_str(sizes), total, d, x.shape()[d]);
  std::vector<Tensor> outs;
  {
    autograd::NoGradGuard ng;
    int64_t off = 0;
    for (auto s : sizes) {
      outs.push_back(x.narrow(d, off, s));
      off += s;
    }
  }
  if (needs_grad({&x})) {
    record_fn("Split", {x}, outs, [d](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{cat(g, d)};
    });
  }
  return outs;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  check_defined("split", "x", x);
  TITAN_CHECK(x.dim() > 0, "split: 'x' must have at least one dim");
  const int64_t d = wrap_dim("split", dim, x.dim());
  TITAN_CHECK(split_size > 0 || x.shape()[d] == 0, "split: split_size must be positive, got {}",
              split_size);
  std::vector<int64_t> sizes;
  for (int64_t off = 0; off < x.shape()[d]; off += split_size)
    sizes.push_back(std::min(split_size, x.shape()[d] - off));
  if (sizes.empty()) sizes.push_back(0);
  return split(x, sizes, d);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  check_defined("chunk", "x", x);
  TITAN_CHECK(chunks > 0, "chunk: chunks must be positive, got {}", chunks);
  TITAN_CHECK(x.dim() > 0, "chunk: 'x' must have at least one dim");
  const int64_t n = x.size(wrap_dim("chunk", dim, x.dim()));
  return split(x, std::max<int64_t>(1, (n + chunks - 1) / chunks), dim);
}

}  // namespace titan
