// softmax / log_softmax (differentiable, fp32; torch names). Over the last dim they run
// the row kernels of titan/kernels/cpu/softmax.h — the vocabulary log-sum-exp
// algorithm (kVocabChunk chunks, online merge, THE vexp) shared with logprobs and
// cross-entropy, so log_softmax(x)[t, y] has the same bits as logprobs of the same
// logits. Another dim is moved to the last position (transpose) and back.
// logsumexp (reduce.h) uses the same kernel. Composed twins in titan::composed.
//
// Errors (titan::Error naming op and argument): dtype not f32, dim out of range,
// an empty reduced dim.
#pragma once
#include "titan/core/tensor.h"

namespace titan {

Tensor softmax(const Tensor& x, int64_t dim = -1);
Tensor log_softmax(const Tensor& x, int64_t dim = -1);

namespace composed {
// exp(x − max) / Σ exp(x − max) and x − logsumexp(x), over the last dim.
Tensor softmax(const Tensor& x);
Tensor log_softmax(const Tensor& x);
Tensor logsumexp(const Tensor& x, int64_t dim, bool keepdim);
}  // namespace composed

}  // namespace titan
