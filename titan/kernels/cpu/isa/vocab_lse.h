// Per-ISA declarations of the vocabulary log-sum-exp pieces (defined once, in
// isa/softmax.cpp) so the fused cross-entropy (isa/loss.cpp) runs the very same
// compiled functions as logprobs_from_logits. See titan/kernels/cpu/softmax.h.
#pragma once
#include <cstdint>

#include "titan/kernels/cpu/softmax.h"

namespace titan::kernels::cpu::TITAN_ISA_NS {

// (max, Σ vexp(x·τ⁻¹ − max)) of x[0..n), 1 <= n <= kVocabChunk, the fixed lane scheme.
VocabStats vocab_chunk_stats(const float* x, int64_t n, float inv_temperature);
// Online merge in ascending chunk order.
VocabStats merge_chunk_stats(VocabStats acc, VocabStats chunk);
// All chunks of a row x[0..V) merged in ascending order.
VocabStats vocab_row_stats(const float* x, int64_t V, float inv_temperature);

}  // namespace titan::kernels::cpu::TITAN_ISA_NS
