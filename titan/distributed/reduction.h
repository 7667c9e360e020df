// The one place that fixes how values from several ranks are combined (DESIGN.md §8).
// Collectives (process_group.h) gather the pieces of all ranks and call these; a
// later TP-invariant mode (the same bits for any TP degree, via a fixed tree over K
// chunks) replaces reduce_pieces and nothing else.
#pragma once
#include <cstdint>
#include <vector>

#include "titan/core/dtype.h"
#include "titan/distributed/process_group.h"

namespace titan::distributed {

// out[i] = op(pieces[0][i], pieces[1][i], ..., pieces[n-1][i]) for i in [0, count),
// combined left to right: ((p0 + p1) + p2) + ... (sum), or max/min (order-free).
//  - f32: each + in f32 (RNE).
//  - bf16: pieces widened to f32, summed left to right in f32, rounded once to bf16
//    (RNE); max/min on the bf16 values.
//  - i32/i64: two's-complement wrap-around sum.
// NaN propagates through sum; max/min follow std::max/std::min with the left operand
// the running value. `out` may alias pieces[0]. Throws titan::Error for other dtypes.
void reduce_pieces(DType dtype, const std::vector<const void*>& pieces, int64_t count, void* out,
                   ReduceOp op);

}  // namespace titan::distributed
