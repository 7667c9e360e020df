// Reductions (differentiable, fp32 in, fp32 out; max indices i64). Torch names.
//
// Fixed, documented summation orders (DESIGN.md §1.3), independent of the thread count:
//  - over a dimension: out[o, i] = Σ_k x[o, k, i] in ascending k, starting from 0;
//  - over all elements: the flat tensor is cut into chunks of kSumChunk elements;
//    inside a chunk element j is added to lane accumulator j % 8 (ascending), the 8
//    lanes are combined by the tree ((0+1)+(2+3))+((4+5)+(6+7)); chunk sums are then
//    added in ascending chunk order. Chunks may run on different threads.
// mean = sum / n. max: NaN propagates (the first NaN wins); ties and the gradient go
// to the FIRST maximal index (as torch on CPU).
//
// Errors (titan::Error naming the op and argument): undefined tensor, dtype not f32,
// dim out of range, reduction of an empty dimension for max/logsumexp.
#pragma once
#include "titan/core/tensor.h"

namespace titan {

inline constexpr int64_t kSumChunk = 4096;

Tensor sum(const Tensor& x);  // 0-d
Tensor sum(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& x);  // 0-d
Tensor mean(const Tensor& x, int64_t dim, bool keepdim = false);

struct MaxResult {
  Tensor values;   // f32, differentiable
  Tensor indices;  // i64, not differentiable
};
Tensor max(const Tensor& x);  // 0-d; gradient to the first maximal element
MaxResult max(const Tensor& x, int64_t dim, bool keepdim = false);

// log Σ_k exp(x_k) over dim (max-shifted; a row of all -inf gives -inf). Uses the
// vocabulary log-sum-exp algorithm of titan/kernels/cpu/softmax.h (chunked online
// merge, THE vexp), so it equals the logprob kernels' lse bit for bit.
// Gradient: g · softmax(x).
Tensor logsumexp(const Tensor& x, int64_t dim, bool keepdim = false);

}  // namespace titan
