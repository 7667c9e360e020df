// Token sampling from one row of logits (DESIGN.md §1.2, "Sampling").
//
// A sampled token depends only on that row's logits, the request's SamplingParams and
// the Philox key (seed, sample index, position): never on batch neighbours, arrival
// order or thread count. Recomputing a preempted sequence therefore samples the
// same tokens.
//
// Algorithm (temperature > 0), vLLM v1's order of filters:
//   z = logits · (1/T) (one fp32 multiply, as THE logprob function scales),
//   p = softmax(z) (kernels/cpu/softmax.h: the vocabulary log-sum-exp algorithm);
//   min-p: keep j with p_j >= min_p · max p;
//   top-k: keep the k most likely (ties: lower id first);
//   top-p: of what is left, sorted by (p desc, id asc), keep the shortest prefix whose
//          running mass reaches top_p · (mass left) (Holtzman et al., 2020);
//   draw: inverse CDF over the kept tokens (in id order when no filter is on, else in
//         sorted order) with u = philox_uniform(seed, position, sample index):
//         the first token whose running mass exceeds u · (kept mass).
// Running masses are double sums in blocks of 64 tokens (within a block in order,
// then block totals in order): a fixed order, independent of anything but the row.
// temperature == 0: argmax of the logits, ties to the lower id.
#pragma once
#include <cstdint>
#include <vector>

#include "titan/infer/sampling_params.h"

namespace titan::infer {

// Reusable buffers of sample_token (one per thread).
struct SamplerScratch {
  std::vector<float> z, p;
  std::vector<int32_t> cand, ids, tmp;
  std::vector<double> sums;
  std::vector<uint32_t> keys, ktmp;
};

// Uniform double in [0, 1) with 53 random bits from Philox 4x32-10 keyed by seed,
// counter = (position, sample_index).
double philox_uniform(uint64_t seed, uint64_t position, uint64_t sample_index);

// Samples a token id in [0, V) from logits (V) fp32 for the token at `position` of
// sample `sample_index`. params must be valid (SamplingParams::validate).
int32_t sample_token(const float* logits, int64_t V, const SamplingParams& params, uint64_t seed,
                     int sample_index, int64_t position, SamplerScratch& scratch);

// argmax of x (n), ties to the lower index.
int32_t argmax(const float* x, int64_t n);

// The n most likely tokens of a row at `temperature` (> 0) with their logprobs,
// best first (ties: lower id first), among the ids [0, candidates) (-1 = all V).
// Logprobs come from the vocabulary log-sum-exp algorithm over all V logits
// (vocab_row_stats + vocab_logprob): the bits of THE logprob function.
TopLogprobs top_logprobs(const float* logits, int64_t V, double temperature, int n, int64_t candidates = -1);

// Seed for a request without one: 64 bits of Philox keyed by the engine seed at
// counter `request_index` (the request's admission number).
uint64_t derive_request_seed(uint64_t engine_seed, uint64_t request_index);

}  // namespace titan::infer
