// Tensor: a strided view (shape, strides in elements, offset) over a shared Storage,
// with a dtype, a device and optional autograd state. Copying a Tensor copies the
// handle (shared). Views share storage; contiguous()/clone()/to() copy.
//
// View and math methods that are differentiable (view/reshape/permute/transpose/
// slice/narrow/expand/unsqueeze/squeeze/select, contiguous, to) are defined in
// titan/ops/shape.cpp and recorded by autograd; see titan/ops/ for the op library.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "titan/core/device.h"
#include "titan/core/dtype.h"
#include "titan/core/error.h"
#include "titan/core/storage.h"

namespace titan {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "[2, 3]"
int64_t shape_numel(const Shape& s);
Shape contiguous_strides(const Shape& s);

namespace autograd {
struct Node;
struct AutogradMeta;
}  // namespace autograd

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape, strides;
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;
  std::unique_ptr<autograd::AutogradMeta> autograd;  // null when no autograd state
  TensorImpl();  // out of line: AutogradMeta is incomplete here
  ~TensorImpl();
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- metadata
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Shape& strides() const { return impl().strides; }
  int64_t dim() const { return static_cast<int64_t>(impl().shape.size()); }
  int64_t size(int64_t d) const;    // negative d counts from the end; throws on bad d
  int64_t stride(int64_t d) const;
  int64_t numel() const { return shape_numel(impl().shape); }
  int64_t offset() const { return impl().offset; }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  bool is_contiguous() const;
  size_t nbytes() const { return numel() * dtype_size(dtype()); }
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  TensorImpl* unsafe_impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  // Pointer to element 0 (storage data + offset). data<T>() checks T matches dtype.
  void* data_ptr() const;
  template <typename T> T* data() const;

  // ---- creation (CPU; dtype default f32)
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device dev = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device dev = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::f32, Device dev = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32);
  // [start, end) with step; dtype i64 by default.
  static Tensor arange(int64_t start, int64_t end, int64_t step = 1, DType dtype = DType::i64);
  // Uniform [0,1) / standard normal from Philox 4x32-10 keyed by seed; element i uses
  // counter (offset + i/4) — so a tensor's values depend only on (seed, offset, i).
  static Tensor rand(const Shape& shape, uint64_t seed, uint64_t offset = 0, DType dtype = DType::f32);
  static Tensor randn(const Shape& shape, uint64_t seed, uint64_t offset = 0, DType dtype = DType::f32);
  // Copies values (converted to dtype by RNE). Throws if numel(shape) != v.size().
  template <typename T>
  static Tensor from_vector(const std::vector<T>& v, const Shape& shape, DType dtype);
  template <typename T>
  static Tensor from_vector(const std::vector<T>& v, const Shape& shape);
  // Values converted to T (any layout; returned in row-major order).
  template <typename T> std::vector<T> to_vector() const;
  // The single element of a 1-element tensor, converted to T.
  template <typename T> T item() const;

  // ---- views and copies (differentiable; titan/ops/shape.cpp)
  Tensor view(const Shape& shape) const;     // needs compatible strides; -1 infers one dim
  Tensor reshape(const Shape& shape) const;  // view if possible, else copy
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;  // removes dim
  Tensor expand(const Shape& shape) const;          // size-1 dims to n (stride 0); -1 keeps
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor squeeze() const;
  Tensor flatten() const { return reshape({-1}); }
  Tensor contiguous() const;  // self if already contiguous
  Tensor clone() const;       // always a fresh contiguous copy
  Tensor to(DType dtype) const;
  // Copies src's values into this tensor (shapes must match; dtype converted). Not recorded.
  void copy_(const Tensor& src);
  void fill_(double value);  // not recorded
  void zero_() { fill_(0.0); }

  // ---- autograd (titan/autograd/)
  bool requires_grad() const;
  Tensor& requires_grad_(bool on = true);  // only on leaves of floating dtype
  bool is_leaf() const;
  Tensor grad() const;           // undefined if none
  void set_grad(const Tensor& g);
  void zero_grad();              // drops the gradient
  Tensor detach() const;         // shares storage, no autograd history
  std::shared_ptr<autograd::Node> grad_fn() const;
  // Backpropagates from this tensor. Without `grad`, the tensor must have one element.
  void backward(const Tensor& grad = Tensor()) const;

  // ---- printing
  std::string str(int max_per_dim = 6) const;

 private:
  TensorImpl& impl() const {
    TITAN_CHECK(impl_ != nullptr, "use of an undefined Tensor");
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

// Makes a tensor with the given metadata over an existing storage (no copy).
Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset);

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::bf16; }  // raw bf16 bits

template <typename T>
T* Tensor::data() const {
  if constexpr (std::is_same_v<T, uint16_t>) {
    TITAN_CHECK(dtype() == DType::bf16 || dtype() == DType::f16,
                "Tensor::data<uint16_t>: tensor dtype is {}", dtype_name(dtype()));
  } else if constexpr (std::is_same_v<T, uint8_t>) {
    TITAN_CHECK(dtype_size(dtype()) == 1, "Tensor::data<uint8_t>: tensor dtype is {}",
                dtype_name(dtype()));
  } else {
    TITAN_CHECK(dtype() == dtype_of<T>(), "Tensor::data: requested {} but tensor dtype is {}",
                dtype_name(dtype_of<T>()), dtype_name(dtype()));
  }
  return static_cast<T*>(data_ptr());
}

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& v, const Shape& shape) {
  return from_vector(v, shape, dtype_of<T>());
}

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& v, const Shape& shape, DType dtype) {
  TITAN_CHECK(shape_numel(shape) == static_cast<int64_t>(v.size()),
              "Tensor::from_vector: {} values for shape {}", v.size(), shape_str(shape));
  Tensor t = empty(shape, dtype);
  if (dtype == dtype_of<T>() && !std::is_same_v<T, uint16_t>) {
    std::memcpy(t.data_ptr(), v.data(), v.size() * sizeof(T));
  } else {
    for (size_t i = 0; i < v.size(); ++i)
      store_from_double(t.data_ptr(), dtype, static_cast<int64_t>(i), static_cast<double>(v[i]));
  }
  return t;
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = contiguous();
  std::vector<T> out(c.numel());
  if (c.dtype() == dtype_of<T>() && !std::is_same_v<T, uint16_t>) {
    std::memcpy(out.data(), c.data_ptr(), out.size() * sizeof(T));
  } else {
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = static_cast<T>(load_as_double(c.data_ptr(), c.dtype(), static_cast<int64_t>(i)));
  }
  return out;
}

template <typename T>
T Tensor::item() const {
  TITAN_CHECK(numel() == 1, "Tensor::item: tensor has {} elements (shape {}), expected 1", numel(),
              shape_str(shape()));
  return static_cast<T>(load_as_double(data_ptr(), dtype(), 0));
}

}  // namespace titan
