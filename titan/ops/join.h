// Joining and splitting along a dimension (differentiable; torch names and semantics).
// Any dtype; gradients are f32 and flow only to floating inputs.
//
// Errors (titan::Error naming the op and the argument): empty tensor list, rank or
// dtype mismatch, sizes that differ outside `dim`, split sizes that do not add up.
#pragma once
#include <vector>

#include "titan/core/tensor.h"

namespace titan {

// Concatenation along dim (all tensors: same rank and dtype, equal sizes except dim).
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);
// Stacks equal-shaped tensors along a new dim (0 <= dim <= rank).
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim);
// Views of x of split_size along dim (the last may be shorter), one autograd node
// whose backward concatenates the output gradients.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim);
// Views of the given sizes (must sum to x.size(dim)).
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);
// ceil(n / chunks)-sized pieces (torch.chunk: may return fewer than `chunks`).
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim);

}  // namespace titan
