// Grouped linear (differentiable): the mixture-of-experts expert projections as one
// grouped GEMM over the tokens sorted by expert (titan/kernels/cpu/grouped_gemm.h).
// Row r of x belongs to group g when offsets[g] <= r < offsets[g+1]; its output row is
// x[r] · w[g]ᵀ, the same FMA chain (k ascending) as linear(x[r], w[g]) gives for that
// row alone, so bits never depend on the other rows of the group or the thread count.
//
// Gradients: dx rows = dy · w[g] (grouped NN GEMM, each row alone again); dw[g] =
// dy_gᵀ · x_g summed over the group's rows in ascending order; an empty group gets
// dw[g] = 0.
//
// Errors (titan::Error naming op and argument): x not f32 2-D, w not f32 3-D, inner
// sizes that differ, offsets not G + 1 non-decreasing values from 0 to x.size(0).
#pragma once
#include <vector>

#include "titan/core/tensor.h"

namespace titan {

// x (M, in) f32, w (G, out, in) f32, offsets G + 1 row offsets -> (M, out) f32.
Tensor grouped_linear(const Tensor& x, const Tensor& w, const std::vector<int64_t>& offsets);

}  // namespace titan
