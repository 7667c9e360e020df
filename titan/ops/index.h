// Indexing ops (differentiable w.r.t. their float inputs; index tensors are i32 or
// i64 and never receive gradients). Torch names and semantics; no negative indices.
//
// Determinism (DESIGN.md §1.3): every scatter-style accumulation (embedding and
// index_select backward, scatter_add) adds contributions to an output element in
// ascending order of the contributing index position (token order), whatever the
// thread count; threads split only independent output columns/lines.
//
// Errors (titan::Error naming op and argument): wrong dtypes, mismatched shapes,
// an index outside [0, n) (the message names the offending value and n).
#pragma once
#include "titan/core/tensor.h"

namespace titan {

// out (ids.shape..., D) = weight[ids]; weight (V, D) f32 or bf16 (out is f32),
// ids any shape, i32/i64 in [0, V). Backward: dweight (V, D) f32, rows scatter-added
// in token order.
Tensor embedding(const Tensor& weight, const Tensor& ids);
// The same rows (the same bits) from the weight in its panel layout
// (repack_linear_weight of the (num_embeddings, D) weight): the generator's tied
// embedding once the LM head is repacked (Decoder::repack_for_decode). Reads each row
// with a stride of w floats (a cache line per element): fine for a step's few rows.
// No backward: throws when panels needs grad.
Tensor embedding_panels(const Tensor& panels, int64_t num_embeddings, const Tensor& ids);

// out = x with dim `dim` replaced by index (1-D i32/i64 of length L): out[.., j, ..] =
// x[.., index[j], ..]. Any dtype forward; gradient (f32) index-added in j order.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);

// out (index.shape) = x[.., index[c], ..] along dim (torch.gather): index has x's rank
// and index.size(d) <= x.size(d) for d != dim. Gradient: scatter_add into zeros.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);

// out = self with src scatter-added along dim (torch.scatter_add): for every position
// c of index, out[c with c[dim] = index[c]] += src[c]. index has self's rank,
// index.size(d) <= src.size(d) and (for d != dim) <= self.size(d). Contributions to
// one element are added in row-major order of index. self, src f32.
// Gradients: dself = g, dsrc = gather(g, dim, index).
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);

// The k largest values along the last dim, sorted descending; ties go to the lower
// index; NaN counts as larger than any number. values f32 (differentiable, gradient
// scattered to indices), indices i64. 0 <= k <= size(-1).
struct TopKResult {
  Tensor values;
  Tensor indices;
};
TopKResult topk(const Tensor& x, int64_t k);

// Index (i64) of the first maximal element (NaN wins) of the flattened x (0-d), or
// along dim. Not differentiable.
Tensor argmax(const Tensor& x);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);

}  // namespace titan
