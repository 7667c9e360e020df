// Differentiable view and copy ops (Tensor methods declared in titan/core/tensor.h).
#include "titan/autograd/function.h"
#include "titan/core/tensor.h"
#include "titan/core/thread_pool.h"

namespace titan {

using autograd::needs_grad;
using autograd::record_fn;

namespace {
int64_t wrap(int64_t d, int64_t nd, const char* op) {
  int64_t w = d < 0 ? d + nd : d;
  TITAN_CHECK(w >= 0 && w < nd, "{}: dimension {} out of range for a {}-d tensor", op, d, nd);
  return w;
}

Shape infer_shape(const Shape& want, int64_t numel, const char* op, const Shape& from) {
  Shape s = want;
  int64_t known = 1, neg = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      TITAN_CHECK(neg < 0, "{}: only one dimension can be -1 in {}", op, shape_str(want));
      neg = static_cast<int64_t>(i);
    } else {
      TITAN_CHECK(s[i] >= 0, "{}: negative dimension in {}", op, shape_str(want));
      known *= s[i];
    }
  }
  if (neg >= 0) {
    TITAN_CHECK(known > 0 && numel % known == 0, "{}: cannot reshape {} into {}", op,
                shape_str(from), shape_str(want));
    s[neg] = numel / known;
  }
  TITAN_CHECK(shape_numel(s) == numel, "{}: cannot reshape {} ({} elements) into {}", op,
              shape_str(from), numel, shape_str(want));
  return s;
}

// Strides for viewing (shape, strides) as new_shape without copying, if possible
// (PyTorch's computeStride algorithm). Empty optional when a copy is needed.
bool view_strides(const Shape& shape, const Shape& strides, const Shape& ns, Shape& out) {
  out.assign(ns.size(), 0);
  if (shape_numel(shape) == 0 || shape.empty()) {  // empty, or a 0-d tensor (one element)
    out = contiguous_strides(ns);
    return true;
  }
  int64_t view_d = static_cast<int64_t>(ns.size()) - 1;
  int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t td = static_cast<int64_t>(shape.size()) - 1; td >= 0; --td) {
    tensor_numel *= shape[td];
    if (td == 0 || (shape[td - 1] != 1 && strides[td - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || ns[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= ns[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (td > 0) {
        chunk_base_stride = strides[td - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

// Sums g (shape `big`) down to `small` where expand() broadcast size-1 dims (same rank).
Tensor sum_to(const Tensor& g, const Shape& small) {
  Tensor gc = g.contiguous();
  Tensor out = Tensor::zeros(small);
  const Shape& big = gc.shape();
  const int64_t nd = static_cast<int64_t>(big.size()), n = gc.numel();
  Shape ostr = contiguous_strides(small);
  const float* pg = gc.data<float>();
  float* po = out.data<float>();
  std::vector<int64_t> idx(nd, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t o = 0;
    for (int64_t d = 0; d < nd; ++d) o += (small[d] == 1 ? 0 : idx[d]) * ostr[d];
    po[o] += pg[i];
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++idx[d] < big[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}
}  // namespace

Tensor Tensor::view(const Shape& want) const {
  Shape ns = infer_shape(want, numel(), "view", shape());
  Shape st;
  TITAN_CHECK(view_strides(shape(), strides(), ns, st),
              "view: cannot view a tensor of shape {} with strides {} as {} (use reshape)",
              shape_str(shape()), shape_str(strides()), shape_str(ns));
  Tensor out = make_view(*this, ns, st, offset());
  if (needs_grad({this})) {
    Shape in = shape();
    record_fn("View", {*this}, {out}, [in](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{g[0].reshape(in)};
    });
  }
  return out;
}

Tensor Tensor::reshape(const Shape& want) const {
  Shape ns = infer_shape(want, numel(), "reshape", shape());
  Shape st;
  if (view_strides(shape(), strides(), ns, st)) return view(ns);
  return contiguous().view(ns);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  const int64_t nd = dim();
  TITAN_CHECK(static_cast<int64_t>(dims.size()) == nd, "permute: {} dims given for a {}-d tensor",
              dims.size(), nd);
  Shape ns(nd), st(nd);
  std::vector<int64_t> inv(nd, -1);
  for (int64_t i = 0; i < nd; ++i) {
    int64_t d = wrap(dims[i], nd, "permute");
    TITAN_CHECK(inv[d] < 0, "permute: dimension {} repeated", d);
    inv[d] = i;
    ns[i] = shape()[d];
    st[i] = strides()[d];
  }
  Tensor out = make_view(*this, ns, st, offset());
  if (needs_grad({this}))
    record_fn("Permute", {*this}, {out}, [inv](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{g[0].permute(inv)};
    });
  return out;
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  std::vector<int64_t> p(dim());
  for (int64_t i = 0; i < dim(); ++i) p[i] = i;
  std::swap(p[wrap(d0, dim(), "transpose")], p[wrap(d1, dim(), "transpose")]);
  return permute(p);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = wrap(d, dim(), "slice");
  const int64_t n = shape()[d];
  TITAN_CHECK(step >= 1, "slice: step must be >= 1, got {}", step);
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape ns = shape(), st = strides();
  ns[d] = (end - start + step - 1) / step;
  st[d] = strides()[d] * step;
  Tensor out = make_view(*this, ns, st, offset() + start * strides()[d]);
  if (needs_grad({this})) {
    Shape in = shape();
    record_fn("Slice", {*this}, {out}, [in, d, start, end, step](const std::vector<Tensor>& g) {
      Tensor z = Tensor::zeros(in);
      z.slice(d, start, end, step).copy_(g[0]);
      return std::vector<Tensor>{z};
    });
  }
  return out;
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = wrap(d, dim(), "narrow");
  TITAN_CHECK(start >= 0 && length >= 0 && start + length <= shape()[d],
              "narrow: range [{}, {}) out of bounds for dimension {} of size {}", start,
              start + length, d, shape()[d]);
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  d = wrap(d, dim(), "select");
  const int64_t n = shape()[d];
  TITAN_CHECK(index >= -n && index < n, "select: index {} out of range for dimension {} of size {}",
              index, d, n);
  if (index < 0) index += n;
  return slice(d, index, index + 1).squeeze(d);
}

Tensor Tensor::expand(const Shape& want) const {
  TITAN_CHECK(static_cast<int64_t>(want.size()) >= dim(), "expand: target {} has fewer dims than {}",
              shape_str(want), shape_str(shape()));
  const int64_t lead = static_cast<int64_t>(want.size()) - dim();
  Shape ns(want.size()), st(want.size());
  for (int64_t i = 0; i < static_cast<int64_t>(want.size()); ++i) {
    if (i < lead) {
      TITAN_CHECK(want[i] >= 0, "expand: -1 not allowed for new leading dim in {}", shape_str(want));
      ns[i] = want[i];
      st[i] = 0;
      continue;
    }
    int64_t s = shape()[i - lead];
    int64_t w = want[i] == -1 ? s : want[i];
    TITAN_CHECK(s == w || s == 1, "expand: cannot expand {} to {} (dim {} is {}, not 1)",
                shape_str(shape()), shape_str(want), i - lead, s);
    ns[i] = w;
    st[i] = s == w ? strides()[i - lead] : 0;
  }
  Tensor out = make_view(*this, ns, st, offset());
  if (needs_grad({this})) {
    Shape in = shape();
    record_fn("Expand", {*this}, {out}, [in, lead](const std::vector<Tensor>& g) {
      Shape mid = in;
      mid.insert(mid.begin(), lead, 1);
      return std::vector<Tensor>{sum_to(g[0], mid).reshape(in)};
    });
  }
  return out;
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap(d, dim() + 1, "unsqueeze");
  Shape ns = shape();
  ns.insert(ns.begin() + d, 1);
  return view(ns);
}

Tensor Tensor::squeeze(int64_t d) const {
  d = wrap(d, dim(), "squeeze");
  if (shape()[d] != 1) return *this;
  Shape ns = shape();
  ns.erase(ns.begin() + d);
  return view(ns);
}

Tensor Tensor::squeeze() const {
  Shape ns;
  for (auto s : shape())
    if (s != 1) ns.push_back(s);
  return view(ns);
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = Tensor::empty(shape(), dtype());
  {
    autograd::NoGradGuard ng;
    out.copy_(*this);
  }
  if (needs_grad({this}))
    record_fn("Clone", {*this}, {out}, [](const std::vector<Tensor>& g) { return g; });
  return out;
}

Tensor Tensor::to(DType dt) const {
  if (dt == dtype()) return *this;
  Tensor out = Tensor::empty(shape(), dt);
  out.copy_(*this);
  if (is_floating(dt) && needs_grad({this}))
    record_fn("ToDtype", {*this}, {out}, [](const std::vector<Tensor>& g) { return g; });
  return out;
}

}  // namespace titan
