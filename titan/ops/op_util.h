// Internal helpers shared by the op files in titan/ops/ (not part of the public API):
// argument checks with one-line titan::Error messages, dimension wrapping, and raw
// contiguous access that never records autograd nodes.
#pragma once
#include <cstdint>
#include <vector>

#include "titan/autograd/function.h"
#include "titan/core/tensor.h"
#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/gemm.h"

namespace titan::ops_detail {

// Elements per thread-pool task below which elementwise loops run inline.
inline constexpr int64_t kGrain = 1 << 15;

// Contiguous version of t without recording a node (the caller records its own op).
inline Tensor contig(const Tensor& t) {
  if (t.is_contiguous()) return t;
  autograd::NoGradGuard ng;
  return t.contiguous();
}

// Contiguous f32 copy of a floating tensor (bf16/f16/fp8 converted exactly), unrecorded.
inline Tensor contig_f32(const Tensor& t) {
  autograd::NoGradGuard ng;
  Tensor c = t.dtype() == DType::f32 ? t : t.to(DType::f32);
  return c.contiguous();
}

inline int64_t wrap_dim(const char* op, int64_t d, int64_t ndim) {
  const int64_t w = d < 0 ? d + ndim : d;
  TITAN_CHECK(w >= 0 && w < ndim, "{}: dim {} out of range for a {}-d tensor", op, d, ndim);
  return w;
}

inline void check_defined(const char* op, const char* arg, const Tensor& t) {
  TITAN_CHECK(t.defined(), "{}: argument '{}' is an undefined tensor", op, arg);
}

inline void check_dtype(const char* op, const char* arg, const Tensor& t, DType want) {
  check_defined(op, arg, t);
  TITAN_CHECK(t.dtype() == want, "{}: argument '{}' must be {}, got {} (shape {})", op, arg,
              dtype_name(want), dtype_name(t.dtype()), shape_str(t.shape()));
}

// f32 or bf16 (the weight dtypes of matmul/linear/embedding).
inline void check_f32_or_bf16(const char* op, const char* arg, const Tensor& t) {
  check_defined(op, arg, t);
  TITAN_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::bf16,
              "{}: argument '{}' must be f32 or bf16, got {} (shape {})", op, arg,
              dtype_name(t.dtype()), shape_str(t.shape()));
}

// i32 or i64 index tensors.
inline void check_index(const char* op, const char* arg, const Tensor& t) {
  check_defined(op, arg, t);
  TITAN_CHECK(t.dtype() == DType::i32 || t.dtype() == DType::i64,
              "{}: argument '{}' must be an i32 or i64 index tensor, got {} (shape {})", op, arg,
              dtype_name(t.dtype()), shape_str(t.shape()));
}

inline void check_dim(const char* op, const char* arg, const Tensor& t, int64_t ndim) {
  check_defined(op, arg, t);
  TITAN_CHECK(t.dim() == ndim, "{}: argument '{}' must be {}-d, got shape {}", op, arg, ndim,
              shape_str(t.shape()));
}

inline void check_contiguous(const char* op, const char* arg, const Tensor& t) {
  TITAN_CHECK(t.is_contiguous(),
              "{}: argument '{}' must be contiguous (shape {}, strides {}); call .contiguous()", op,
              arg, shape_str(t.shape()), shape_str(t.strides()));
}

// A weight repacked for inference (repack_linear_weight): f32 [ceil(rows / w), in, w]
// contiguous, w = gemm_panel_width(), packed from a (rows, in) matrix. `tensors`
// (the panels and the op's other inputs) must not need grad: these ops have no backward.
// Returns in.
inline int64_t check_panels(const char* op, const Tensor& panels, int64_t rows,
                            std::initializer_list<const Tensor*> tensors) {
  check_dtype(op, "panels", panels, DType::f32);
  check_dim(op, "panels", panels, 3);
  const int64_t pw = kernels::cpu::gemm_panel_width();
  TITAN_CHECK(rows >= 1 && panels.size(2) == pw && panels.size(0) == (rows + pw - 1) / pw &&
                  panels.is_contiguous(),
              "{}: 'panels' has shape {}, expected contiguous [{}, in, {}] for {} rows "
              "(repack_linear_weight's layout)",
              op, shape_str(panels.shape()), (rows + pw - 1) / pw, pw, rows);
  TITAN_CHECK(!autograd::needs_grad(tensors),
              "{}: no backward: the weight is repacked for inference "
              "(Decoder::repack_for_decode); run it with grad mode off",
              op);
  return panels.size(1);
}

// Index values of an i32/i64 tensor as int64 (row-major order).
inline std::vector<int64_t> index_values(const Tensor& t) { return t.to_vector<int64_t>(); }

// Shape products around dimension d: (outer, n, inner) with n = shape[d].
struct DimSplit {
  int64_t outer = 1, n = 1, inner = 1;
};
inline DimSplit split_at(const Shape& s, int64_t d) {
  DimSplit r;
  for (int64_t i = 0; i < d; ++i) r.outer *= s[i];
  r.n = s[d];
  for (size_t i = d + 1; i < s.size(); ++i) r.inner *= s[i];
  return r;
}

// Runs fn(begin, end) over [0, n) on the pool when n is large (static partition).
template <typename F>
inline void parallel_elems(int64_t n, F&& fn) {
  if (n < kGrain) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
  parallel_for_grain(n, kGrain, fn);
}

}  // namespace titan::ops_detail
