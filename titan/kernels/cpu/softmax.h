// Softmax-family row kernels over the last dimension, and the vocabulary
// log-sum-exp algorithm shared by the trainer and the generator (DESIGN.md §1.2).
// Raw fp32 kernels: pointers, sizes, no allocation of tensors, no autograd.
//
// THE VOCABULARY LOG-SUM-EXP ALGORITHM (the trainer/generator contract). For a row of
// logits x[0..V) and inv_temperature τ⁻¹ (a multiply, applied here on both sides):
//   1. scaled logits z_j = x_j · τ⁻¹ (one fp32 multiply);
//   2. the row is split into chunks of kVocabChunk columns (the last one shorter);
//      for each chunk vocab_chunk_stats gives (max_c, sum_c = Σ_j vexp(z_j − max_c))
//      with the fixed lane scheme of isa/reduce.h;
//   3. chunks are merged in ascending order with merge_chunk_stats (online rule
//      m = max(m_a, m_b), s = s_a·exp(m_a − m) + s_b·exp(m_b − m));
//   4. lse = max + log(sum) (vocab_lse); the log-probability of token t is
//      (z_t − max) − log(sum) (vocab_logprob).
// logprobs_from_logits, log_softmax_fwd, logsumexp_fwd and the fused cross-entropy of
// loss.h all use exactly these functions, so their bits agree with each other for the
// same logits (log_softmax_fwd / logsumexp_fwd with τ⁻¹ = 1). Source of the online
// merge: Milakov & Gimelshein, "Online normalizer calculation for softmax" (2018).
//
// Batch invariance: each row is computed by one code path that depends only on that
// row and on V; rows are split across threads (titan::parallel_for). NaN inputs give
// NaN results.
#pragma once
#include <cstdint>

namespace titan::kernels::cpu {

// The vocabulary chunk width of the log-sum-exp algorithm (columns). Changing it
// changes the bits of every logprob: it is part of the trainer/generator contract.
inline constexpr int64_t kVocabChunk = 4096;

// Running statistics of temperature-scaled logits: max and Σ exp(z − max).
// An all −inf chunk has max = −inf and sum = 0.
struct VocabStats {
  float max;
  float sum;
};

// Stats of one chunk x[0..n) scaled by inv_temperature; 1 <= n <= kVocabChunk.
// Throws titan::Error on a bad n or a non-positive / non-finite inv_temperature.
VocabStats vocab_chunk_stats(const float* x, int64_t n, float inv_temperature);
// Online merge of the running stats `acc` (chunks before) with the next chunk's stats.
VocabStats merge_chunk_stats(VocabStats acc, VocabStats chunk);
// Stats of a whole row x[0..V): vocab_chunk_stats per chunk merged in ascending order.
VocabStats vocab_row_stats(const float* x, int64_t V, float inv_temperature);
// log Σ exp(z) = max + log(sum) (−inf for an all −inf row).
float vocab_lse(VocabStats s);
// log-probability of a token whose scaled logit is z: (z − max) − log(sum).
float vocab_logprob(VocabStats s, float scaled_logit);

// THE log-probability function of DESIGN.md §1.2 (generator and trainer):
//   out_logprobs[t] = log_softmax(logits[t] · inv_temperature)[targets[t]]
//   out_lse[t]      = logsumexp(logits[t] · inv_temperature)      (optional, may be null)
// logits (T, V) fp32 row-major; targets (T) int32 or int64 in [0, V).
// Throws titan::Error for T < 0, V < 1, null pointers, a target outside [0, V), or
// inv_temperature not finite and > 0.
void logprobs_from_logits(float* out_logprobs, float* out_lse, const float* logits,
                          const int64_t* targets, int64_t T, int64_t V, float inv_temperature);
void logprobs_from_logits(float* out_logprobs, float* out_lse, const float* logits,
                          const int32_t* targets, int64_t T, int64_t V, float inv_temperature);

// out (T) = logsumexp over the last dim of x (T, V). Throws titan::Error on bad sizes.
void logsumexp_fwd(float* out, const float* x, int64_t T, int64_t V);

// out (T, V) = softmax(x) over the last dim: exp(x − max) · (1 / sum), with the vocabulary
// stats above. out may alias x. Throws titan::Error on bad sizes / null pointers.
void softmax_fwd(float* out, const float* x, int64_t T, int64_t V);
// dx (T, V) = y ⊙ (dout − Σ_j dout_j y_j), y = softmax output (T, V). Overwrites dx
// (may alias dout). Source: PyTorch softmax_backward_data.
void softmax_bwd(float* dx, const float* dout, const float* y, int64_t T, int64_t V);

// out (T, V) = log_softmax(x) = (x − max) − log(sum); lse (T) optional (may be null).
// out may alias x. Bits equal logprobs_from_logits(..., inv_temperature = 1) gathered.
void log_softmax_fwd(float* out, float* lse, const float* x, int64_t T, int64_t V);
// dx (T, V) = dout − exp(logp) · Σ_j dout_j, logp = log_softmax output (T, V).
// Overwrites dx (may alias dout). Source: PyTorch log_softmax_backward_data.
void log_softmax_bwd(float* dx, const float* dout, const float* logp, int64_t T, int64_t V);

}  // namespace titan::kernels::cpu
