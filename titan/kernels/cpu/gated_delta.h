// The gated delta rule (Gated DeltaNet, Yang, Kautz & Hatamizadeh 2024; Qwen3-Next) and
// its per-channel-gate form (Kimi Delta Attention, Kimi Linear 2025), forward and
// backward, in the chunked form (WY / UT transform, chunk kGatedDeltaChunk = 64 as in
// flash-linear-attention), raw fp32, no autograd.
//
// The recurrence (fla naive_recurrent_gated_delta_rule / naive_recurrent_kda; HF
// torch_recurrent_gated_delta_rule), per sequence and head, state S (K, V), S_{-1} = 0:
//   S_t = diag(exp(g_t)) S_{t-1}                        (GDN: g_t scalar; KDA: g_t (K))
//   S_t = S_t + β_t k_t (v_t − S_tᵀ k_t)ᵀ               (= α S (I − β k kᵀ) + β k vᵀ, transposed)
//   o_t = S_tᵀ (scale · q_t)
// g is the log decay (<= 0 in the models: −exp(A_log) · softplus(a + dt_bias)).
//
// Chunked form (HF torch_chunk_gated_delta_rule), chunks aligned to absolute positions
// [0, 64), [64, 128), ... of each sequence; S_0 = the state at the chunk start, G_t the
// in-chunk cumulative sum of g (vector for KDA), E_tj = exp(G_t − G_j):
//   r_t = β_t (v_t − S_0ᵀ (exp(G_t) ⊙ k_t))
//   u_t = r_t − Σ_{j<t} a_tj u_j,        a_tj = β_t Σ_d E_tj[d] k_t[d] k_j[d]   (UT solve)
//   o_t = S_0ᵀ (exp(G_t) ⊙ q̂_t) + Σ_{j≤t} c_tj u_j,   c_tj = Σ_d E_tj[d] q̂_t[d] k_j[d],  q̂ = scale·q
//   S_C = diag(exp(G_{C−1})) S_0 + Σ_j (E_{C−1,j} ⊙ k_j) u_jᵀ          (at a full chunk)
// Every quantity of row t is computed from rows <= t only, in one fixed order (sums over
// j ascending, over d ascending, dot products with the fixed lane scheme of
// isa/reduce.h). A decode step at position p therefore computes exactly the expression
// the trainer computes for position p, given the state slot (S_0 of p's chunk and the
// k, G, u rows of the chunk's earlier tokens): prefill == token-by-token decode ==
// chunked prefill, bit for bit (docs/linear-attention.md).
//
// Layouts: packed varlen tokens (T = cu_seqlens[N]); q, k (T, H, K); v, o (T, H, V);
// beta (T, H); g (T, H) or, per-channel, (T, H, K). Sequences and heads are independent
// tasks (one thread each), so results do not depend on the batch or the thread count.
#pragma once
#include <cstdint>

namespace titan::kernels::cpu {

// Chunk length of the chunked form (fixed: it defines the arithmetic).
inline constexpr int64_t kGatedDeltaChunk = 64;

// Floats of one sequence's state slot for H heads: per head S (K, V), then the partial
// chunk's rows k (C, K), G (C, Gd), u (C, V) with C = kGatedDeltaChunk, Gd = K when
// per_channel else 1. Where the partial chunk stands is the sequence position modulo C.
int64_t gated_delta_state_floats(int64_t H, int64_t K, int64_t V, bool per_channel);

// Number of chunks the N sequences of cu_seqlens span (Σ_n ceil(len_n / C)): the rows of
// gated_delta_fwd's chunk_states.
int64_t gated_delta_num_chunks(const int64_t* cu_seqlens, int64_t N);

// Forward. o (T, H, V) overwritten.
// chunk_states: null, or (gated_delta_num_chunks, H, K, V): S_0 of every chunk, saved for
//   gated_delta_bwd (training layout only: requires state == null).
// state: null (every sequence starts at position 0 from S = 0, nothing kept), or
//   (N, gated_delta_state_floats) slots read and updated in place; sequence n's first
//   token then sits at absolute position start_pos[n] (its slot holds the state after
//   start_pos[n] tokens; a slot at position 0 must be zeroed by the caller).
// start_pos: (N) or null (all 0); must be null or all 0 when state is null.
// scale: the query scale (1/sqrt(K) in the models). Throws titan::Error on bad sizes,
// pointers or a cu_seqlens that is not non-decreasing from 0.
void gated_delta_fwd(float* o, float* chunk_states, float* state, const float* q, const float* k,
                     const float* v, const float* g, const float* beta, const int64_t* cu_seqlens,
                     const int64_t* start_pos, int64_t N, int64_t H, int64_t K, int64_t V,
                     bool per_channel, float scale);

// The generator's forward over a pool of state slots: state (num_slots,
// gated_delta_state_floats) f32; sequence n reads and updates slot slot[n] in place, its
// first token at absolute position start_pos[n] (bits as gated_delta_fwd with that slot
// as its row). snap_slot: null, or (N) with -1 for none: slot snap_slot[n] receives a
// copy of sequence n's slot as it stands before the token at absolute position
// snap_pos[n] (start_pos[n] <= snap_pos[n] <= start_pos[n] + len_n; the end means the
// final state): the prefix cache's state snapshot at a KV block boundary. Throws
// titan::Error on a slot outside [0, num_slots), two sequences sharing a slot, a snapshot
// into a sequence's slot or at a position outside its tokens.
void gated_delta_fwd_slots(float* o, float* state, int64_t num_slots, const int64_t* slot,
                           const int64_t* snap_slot, const int64_t* snap_pos, const float* q,
                           const float* k, const float* v, const float* g, const float* beta,
                           const int64_t* cu_seqlens, const int64_t* start_pos, int64_t N,
                           int64_t H, int64_t K, int64_t V, bool per_channel, float scale);

// Backward of gated_delta_fwd in the training layout (zero initial state, no gradient
// through a final state), given dout (T, H, V) and chunk_states from the forward.
// dq, dk (T, H, K); dv (T, H, V); dg (T, H) or (T, H, K); dbeta (T, H): all overwritten.
// The math: the chunked form above differentiated by hand (reverse over chunks, the UT
// solve transposed as a back substitution); checked against float64 autograd of the
// recurrence and fla's naive references (tests/kernels/gated_delta_test.cpp).
void gated_delta_bwd(float* dq, float* dk, float* dv, float* dg, float* dbeta, const float* dout,
                     const float* chunk_states, const float* q, const float* k, const float* v,
                     const float* g, const float* beta, const int64_t* cu_seqlens, int64_t N,
                     int64_t H, int64_t K, int64_t V, bool per_channel, float scale);

// Short causal depthwise conv1d (Mamba / Qwen3-Next / Kimi Linear, HF causal_conv1d_fn
// without activation): per sequence, channel c and token t,
//   out[t][c] = Σ_{i=0}^{W−1} w[c][i] · x[t − (W−1) + i][c]      (i ascending)
// where tokens before the sequence start are the sequence's conv tail (the last W−1
// inputs before it; zero when tail is null).
// out, x (T, C); w (C, W) (HF conv1d.weight squeezed); tail: null or (N, W−1, C), read
// before and overwritten after with the last W−1 inputs of each sequence (older tail rows
// kept when a sequence has fewer than W−1 new tokens). out must not alias x.
void causal_conv1d_fwd(float* out, float* tail, const float* x, const float* w,
                       const int64_t* cu_seqlens, int64_t N, int64_t C, int64_t W);

// Backward of causal_conv1d_fwd with tail == null (training):
//   dx[s][c] = Σ_i w[c][i] · dout[s + (W−1) − i][c]   (within the sequence; overwritten)
//   dw[c][i] = Σ_t dout[t][c] · x[t − (W−1) + i][c]    (overwritten; summed over fixed
//   blocks of 64 tokens in ascending order, the partials added in block order, so dw
//   does not depend on the thread count).
void causal_conv1d_bwd(float* dx, float* dw, const float* dout, const float* x, const float* w,
                       const int64_t* cu_seqlens, int64_t N, int64_t C, int64_t W);

}  // namespace titan::kernels::cpu
