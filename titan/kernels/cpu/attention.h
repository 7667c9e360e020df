// Flash-style causal attention kernels (fp32, raw pointers, no autograd), shared by
// the trainer (packed variable-length sequences, cu_seqlens) and the generator
// (paged KV cache, block tables). Both paths give BITWISE identical outputs for the
// same query: a query at position p of its sequence visits keys in blocks
// [0,B), [B,2B), ... up to p in ascending order with an online softmax (m, l, acc);
// per block the scores s_j = scale * sum_d q_d k_{j,d} (d ascending, one FMA chain
// per key), optional soft-cap, masking (j > p, outside the window or the chunk, unfilled tail) to
// -inf, one simd::vexp, a fixed-width sum. The trainer path repacks each sequence's
// K/V into the paged layout (blocks aligned at position 0) and calls the same
// compiled per-query-tile function as the paged path (notes/batch-invariance.md,
// "Attention"). Threads split (token tile, KV head) work; a query's key range is
// never split.
//
// Math: FlashAttention-2 (Dao, 2023) forward/backward with the saved logsumexp;
// soft-cap as in Gemma 2 (s = cap * tanh(s / cap)); attention sinks as in gpt-oss
// (one learned logit per query head that joins the softmax denominator only).
//
// Errors: every entry point throws titan::Error naming the function, the argument,
// the expected and the actual value (sizes, H % Hkv, cu_seqlens, block tables,
// positions, slots).
#pragma once
#include <cstdint>

namespace titan::kernels::cpu {

// THE KV block size: the paged KV cache uses it as its page size, and attention
// visits keys in blocks of this many tokens on both the training and the paged path.
// 32 rather than 16: fewer per-block softmax rescales; measured 5-35 % faster forward
// and backward with AVX2 (docs/benchmarks-history.md, "Attention").
inline constexpr int kKvBlockSize = 32;

struct AttentionParams {
  float scale = 0.0f;            // scores = scale * q.k; 0 means 1/sqrt(Dh)
  int window = 0;                // sliding window W: key j visible iff p - W < j <= p; 0 = off
  int chunk = 0;                 // chunked local attention C (Llama 4): key j visible iff
                                 // j <= p and floor(j / C) == floor(p / C); 0 = off
  float softcap = 0.0f;          // s = softcap * tanh(s / softcap) before masking; 0 = off
  const float* sinks = nullptr;  // (H) one sink logit per query head, or null
  int block_size = kKvBlockSize; // KV block size B (multiple of 16, 16..256)
};

// Packed variable-length causal attention, forward (trainer).
//   out (T, H, Dh), lse (T, H) natural-log logsumexp of each query's scores (sink
//   included), saved for the backward; q (T, H, Dh), k (T, Hkv, Dh), v (T, Hkv, Dh);
//   cu_seqlens (S + 1) int32: sequence s is tokens [cu_seqlens[s], cu_seqlens[s+1]),
//   a token's position is its index within its sequence, no attention across sequences.
//   H % Hkv == 0 (GQA/MQA: query head h reads KV head h / (H / Hkv)); Dh % 8 == 0, <= 256.
// out and lse are overwritten. Memory: O(T) scratch (one repacked copy of K and V).
void attention_varlen_fwd(float* out, float* lse, const float* q, const float* k, const float* v,
                          const int32_t* cu_seqlens, int S, int64_t T, int H, int Hkv, int Dh,
                          const AttentionParams& params = {});

// Backward of attention_varlen_fwd (FlashAttention-2 with the saved lse:
// p = exp(s - lse), D_i = dO_i . O_i, ds = p (dp - D), softcap chain rule).
//   dq (T, H, Dh), dk (T, Hkv, Dh), dv (T, Hkv, Dh): overwritten (not accumulated).
//   dsinks (H): overwritten when params.sinks is set and dsinks is not null
//   (dsink_h = -sum_i exp(sink_h - lse_ih) D_ih); ignored otherwise.
//   dout, out (T, H, Dh), lse (T, H) from the forward; q, k, v, cu_seqlens, sizes and
//   params as in the forward.
// Deterministic: one task per (sequence, KV head) owns its dk/dv rows and the dq rows
// of its query heads and visits KV blocks and queries in a fixed order; the result
// does not depend on the thread count. Memory: O(T) scratch, never T x T.
void attention_varlen_bwd(float* dq, float* dk, float* dv, float* dsinks, const float* dout,
                          const float* out, const float* lse, const float* q, const float* k,
                          const float* v, const int32_t* cu_seqlens, int S, int64_t T, int H,
                          int Hkv, int Dh, const AttentionParams& params = {});

// Writes T tokens' K/V into a paged cache (one layer).
//   k_cache (num_blocks, Hkv, Dh, B) — head-dim major inside a block;
//   v_cache (num_blocks, Hkv, B, Dh); k, v (T, Hkv, Dh);
//   slot_mapping (T): slot = block * B + offset; a negative slot skips the token
//   (padding). Throws if a slot is >= num_blocks * B.
void kv_cache_write(float* k_cache, float* v_cache, const float* k, const float* v,
                    const int32_t* slot_mapping, int64_t T, int Hkv, int Dh, int64_t num_blocks,
                    int block_size = kKvBlockSize);
void kv_cache_write(float* k_cache, float* v_cache, const float* k, const float* v,
                    const int64_t* slot_mapping, int64_t T, int Hkv, int Dh, int64_t num_blocks,
                    int block_size = kKvBlockSize);

// Causal attention of T query tokens against a paged KV cache (generator: chunked
// prefill and decode alike; a chunk writes its K/V with kv_cache_write first).
//   out (T, H, Dh); lse (T, H) or null; q (T, H, Dh); k_cache/v_cache as above with
//   block size params.block_size; block_tables (num_seqs, max_blocks_per_seq) int32:
//   physical block of each logical block; seq_of_token (T), pos_of_token (T) int32:
//   token t attends to positions 0..pos_of_token[t] of sequence seq_of_token[t].
// Table entries that a token reads must lie in [0, num_blocks). Bitwise equal to
// attention_varlen_fwd for the same query, whatever the batch composition.
void attention_paged_fwd(float* out, float* lse, const float* q, const float* k_cache,
                         const float* v_cache, const int32_t* block_tables,
                         const int32_t* seq_of_token, const int32_t* pos_of_token, int64_t T,
                         int H, int Hkv, int Dh, int num_seqs, int max_blocks_per_seq,
                         int64_t num_blocks, const AttentionParams& params = {});

}  // namespace titan::kernels::cpu
