#include "titan/core/tensor.h"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <cstring>
#include <sstream>

#include "titan/autograd/node.h"
#include "titan/core/philox.h"
#include "titan/core/thread_pool.h"

namespace titan {

TensorImpl::TensorImpl() = default;
TensorImpl::~TensorImpl() = default;

std::string shape_str(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (int64_t i = static_cast<int64_t>(s.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= std::max<int64_t>(s[i], 1);
  }
  return st;
}

static int64_t wrap_dim(int64_t d, int64_t ndim, const char* what) {
  int64_t w = d < 0 ? d + ndim : d;
  TITAN_CHECK(w >= 0 && w < ndim, "{}: dimension {} out of range for a {}-d tensor", what, d, ndim);
  return w;
}

int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, dim(), "Tensor::size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, dim(), "Tensor::stride")]; }

bool Tensor::is_contiguous() const {
  int64_t acc = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (shape()[i] == 1) continue;
    if (strides()[i] != acc) return false;
    acc *= shape()[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  return static_cast<char*>(impl().storage->data()) + impl().offset * dtype_size(impl().dtype);
}

Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device dev) {
  for (auto d : shape)
    TITAN_CHECK(d >= 0, "Tensor::empty: negative dimension in shape {}", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(shape_numel(shape) * dtype_size(dtype), dev);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device dev) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(shape_numel(shape) * dtype_size(dtype), dev, true);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::ones(const Shape& shape, DType dtype, Device dev) { return full(shape, 1.0, dtype); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype) {
  Tensor t = empty(shape, dtype);
  t.fill_(value);
  return t;
}

Tensor Tensor::arange(int64_t start, int64_t end, int64_t step, DType dtype) {
  TITAN_CHECK(step != 0, "Tensor::arange: step must be non-zero");
  int64_t n = std::max<int64_t>(0, (end - start + step - (step > 0 ? 1 : -1)) / step);
  Tensor t = empty({n}, dtype);
  for (int64_t i = 0; i < n; ++i) store_from_double(t.data_ptr(), dtype, i, static_cast<double>(start + i * step));
  return t;
}

Tensor Tensor::rand(const Shape& shape, uint64_t seed, uint64_t offset, DType dtype) {
  Tensor t = empty(shape, DType::f32);
  float* p = t.data<float>();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; i += 4) {
    auto r = philox_draw(seed, offset + static_cast<uint64_t>(i / 4));
    for (int j = 0; j < 4 && i + j < n; ++j) p[i + j] = uint_to_unit_float(r[j]);
  }
  return dtype == DType::f32 ? t : t.to(dtype);
}

Tensor Tensor::randn(const Shape& shape, uint64_t seed, uint64_t offset, DType dtype) {
  Tensor t = empty(shape, DType::f32);
  float* p = t.data<float>();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; i += 2) {
    auto r = philox_draw(seed, offset + static_cast<uint64_t>(i / 2), 1);
    p[i] = box_muller(r[0], r[1]);
    if (i + 1 < n) {
      // Second value from the other pair of the same draw.
      p[i + 1] = box_muller(r[2], r[3]);
    }
  }
  return dtype == DType::f32 ? t : t.to(dtype);
}

// Iterates over all elements of a strided tensor in row-major order: fn(linear i, storage offset).
template <typename F>
static void for_each_offset(const Tensor& t, F&& fn) {
  const int64_t nd = t.dim(), n = t.numel();
  if (n == 0) return;
  if (t.is_contiguous()) {
    for (int64_t i = 0; i < n; ++i) fn(i, i);
    return;
  }
  std::vector<int64_t> idx(nd, 0);
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    fn(i, off);
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++idx[d] < t.shape()[d]) {
        off += t.strides()[d];
        break;
      }
      off -= t.strides()[d] * (idx[d] - 1);
      idx[d] = 0;
    }
  }
}

// A same-dtype copy between strided layouts (views: narrow, expand, permute, ...):
// the dimensions are coalesced where both layouts allow it, then each row of the
// innermost dimension is one memcpy (both unit-stride) or a strided loop, rows split
// over the thread pool. Element values are moved, never computed, so the result does
// not depend on the split.
static void copy_same_dtype_strided(char* dbase, const Tensor& dst, const char* sbase, const Tensor& src,
                                    size_t es) {
  // Coalesced (size, dst stride, src stride), outermost first; size-1 dims dropped.
  std::vector<std::array<int64_t, 3>> dims;
  for (int64_t d = 0; d < dst.dim(); ++d) {
    const int64_t n = dst.shape()[d];
    if (n == 1) continue;
    const int64_t a = dst.strides()[d], b = src.strides()[d];
    if (!dims.empty() && dims.back()[1] == a * n && dims.back()[2] == b * n) {
      dims.back() = {dims.back()[0] * n, a, b};
    } else {
      dims.push_back({n, a, b});
    }
  }
  if (dims.empty()) dims.push_back({1, 1, 1});
  // Plain copies, not a structured binding: the lambda below captures them.
  const int64_t len = dims.back()[0], dstep = dims.back()[1], sstep = dims.back()[2];
  dims.pop_back();
  int64_t rows = 1;
  for (auto& d : dims) rows *= d[0];
  const bool unit = dstep == 1 && sstep == 1;
  auto run_rows = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t rem = r, doff = 0, soff = 0;
      for (size_t k = dims.size(); k-- > 0;) {
        const int64_t i = rem % dims[k][0];
        rem /= dims[k][0];
        doff += i * dims[k][1];
        soff += i * dims[k][2];
      }
      char* dp = dbase + doff * static_cast<int64_t>(es);
      const char* sp = sbase + soff * static_cast<int64_t>(es);
      if (unit) {
        std::memcpy(dp, sp, static_cast<size_t>(len) * es);
      } else if (es == 4) {
        for (int64_t j = 0; j < len; ++j) std::memcpy(dp + j * dstep * 4, sp + j * sstep * 4, 4);
      } else if (es == 2) {
        for (int64_t j = 0; j < len; ++j) std::memcpy(dp + j * dstep * 2, sp + j * sstep * 2, 2);
      } else {
        for (int64_t j = 0; j < len; ++j)
          std::memcpy(dp + j * dstep * static_cast<int64_t>(es), sp + j * sstep * static_cast<int64_t>(es), es);
      }
    }
  };
  // Rows of at least ~16 KiB per task, so small copies stay on the calling thread.
  const int64_t grain = std::max<int64_t>(1, (int64_t{16} << 10) / std::max<int64_t>(1, len * static_cast<int64_t>(es)));
  parallel_for_grain(rows, grain, run_rows);
}

void Tensor::copy_(const Tensor& src) {
  TITAN_CHECK(src.shape() == shape(), "Tensor::copy_: source shape {} != destination shape {}",
              shape_str(src.shape()), shape_str(shape()));
  const DType sd = src.dtype(), dd = dtype();
  char* dbase = static_cast<char*>(data_ptr());
  const char* sbase = static_cast<const char*>(src.data_ptr());
  if (sd == dd && is_contiguous() && src.is_contiguous()) {
    std::memcpy(dbase, sbase, nbytes());
    return;
  }
  if (numel() == 0) return;
  if (sd == dd) {
    copy_same_dtype_strided(dbase, *this, sbase, src, dtype_size(sd));
    return;
  }
  // Gather source offsets in row-major order, then write.
  std::vector<int64_t> soff(numel());
  for_each_offset(src, [&](int64_t i, int64_t o) { soff[i] = o; });
  const size_t es = dtype_size(sd), ed = dtype_size(dd);
  for_each_offset(*this, [&](int64_t i, int64_t o) {
    if (sd == dd) {
      std::memcpy(dbase + o * ed, sbase + soff[i] * es, es);
    } else if (sd == DType::f32 && dd == DType::bf16) {
      float v;
      std::memcpy(&v, sbase + soff[i] * 4, 4);
      reinterpret_cast<uint16_t*>(dbase)[o] = f32_to_bf16(v);
    } else if (sd == DType::bf16 && dd == DType::f32) {
      reinterpret_cast<float*>(dbase)[o] = bf16_to_f32(reinterpret_cast<const uint16_t*>(sbase)[soff[i]]);
    } else {
      store_from_double(dbase, dd, o, load_as_double(sbase, sd, soff[i]));
    }
  });
}

void Tensor::fill_(double value) {
  if (dtype() == DType::f32 && is_contiguous()) {
    float* p = data<float>();
    std::fill(p, p + numel(), static_cast<float>(value));
    return;
  }
  char* base = static_cast<char*>(data_ptr());
  for_each_offset(*this, [&](int64_t, int64_t o) { store_from_double(base, dtype(), o, value); });
}

// ---- autograd accessors
bool Tensor::requires_grad() const {
  auto* m = impl().autograd.get();
  return m && (m->requires_grad || m->grad_fn);
}

Tensor& Tensor::requires_grad_(bool on) {
  TITAN_CHECK(!on || is_floating(dtype()), "requires_grad_: only floating tensors can require grad, got {}",
              dtype_name(dtype()));
  auto& m = impl().autograd;
  TITAN_CHECK(!(m && m->grad_fn), "requires_grad_: only leaf tensors can be marked (this one has grad_fn {})",
              m ? m->grad_fn->name() : "");
  if (!m) m = std::make_unique<autograd::AutogradMeta>();
  m->requires_grad = on;
  return *this;
}

bool Tensor::is_leaf() const {
  auto* m = impl().autograd.get();
  return !m || !m->grad_fn;
}

Tensor Tensor::grad() const {
  auto* m = impl().autograd.get();
  return m ? m->grad : Tensor();
}

void Tensor::set_grad(const Tensor& g) {
  auto& m = impl().autograd;
  if (!m) m = std::make_unique<autograd::AutogradMeta>();
  m->grad = g;
}

void Tensor::zero_grad() {
  if (auto* m = impl().autograd.get()) m->grad = Tensor();
}

Tensor Tensor::detach() const { return make_view(*this, shape(), strides(), offset()); }

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  auto* m = impl().autograd.get();
  return m ? m->grad_fn : nullptr;
}

void Tensor::backward(const Tensor& grad) const {
  Tensor g = grad;
  if (!g.defined()) {
    TITAN_CHECK(numel() == 1, "backward: implicit gradient only for 1-element tensors, this has shape {}",
                shape_str(shape()));
    g = Tensor::ones(shape());
  }
  autograd::backward({*this}, {g});
}

// ---- printing
std::string Tensor::str(int max_per_dim) const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  Tensor c = contiguous();
  std::vector<double> v(c.numel());
  for (int64_t i = 0; i < c.numel(); ++i) v[i] = load_as_double(c.data_ptr(), c.dtype(), i);
  const bool flt = is_floating(dtype());
  std::function<void(int64_t, int64_t)> rec = [&](int64_t d, int64_t base) {
    if (d == dim()) {
      os << (flt ? fmt::format("{:.6g}", v[base]) : fmt::format("{}", static_cast<int64_t>(v[base])));
      return;
    }
    int64_t n = shape()[d], inner = 1;
    for (int64_t k = d + 1; k < dim(); ++k) inner *= shape()[k];
    os << "[";
    for (int64_t i = 0; i < n; ++i) {
      if (n > max_per_dim && i == max_per_dim / 2) {
        os << "..., ";
        i = n - max_per_dim / 2;
      }
      rec(d + 1, base + i * inner);
      if (i + 1 < n) os << (d + 1 == dim() ? ", " : ",\n" + std::string(d + 8, ' '));
    }
    os << "]";
  };
  os << "tensor(";
  if (numel() == 0) os << "[]";
  else rec(0, 0);
  os << ", shape=" << shape_str(shape()) << ", dtype=" << dtype_name(dtype());
  if (auto fn = grad_fn()) os << ", grad_fn=" << fn->name();
  else if (requires_grad()) os << ", requires_grad";
  os << ")";
  return os.str();
}

}  // namespace titan
