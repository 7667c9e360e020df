// Linear-attention ops of the hybrid models (Qwen3-Next's Gated DeltaNet, Kimi Linear's
// Kimi Delta Attention), differentiable, fp32, on titan/kernels/cpu/gated_delta.h: the
// chunked gated delta rule (chunk 64 aligned to absolute positions, one arithmetic for
// trainer and generator: docs/linear-attention.md), the short causal depthwise conv1d,
// and the gated RMSNorm / L2 normalisation around them. The *_cached forms are the
// generator's: they resume from a per-sequence state slot and update it in place; they
// have no backward.
//
// Errors (titan::Error naming op and argument): wrong dtype (f32; cu_seqlens and
// start_pos i32/i64), rank or shape; H of q/k not dividing H of v; cu_seqlens not from
// 0 to T without decreasing; a state tensor of the wrong size; grad mode on a cached op.
#pragma once
#include "titan/core/tensor.h"

namespace titan {

// Gated DeltaNet (fla chunk_gated_delta_rule, HF torch_chunk_gated_delta_rule without the
// in-kernel L2 norm): q, k (T, Hk, K); v (T, H, V); g (T, H) log decay; beta (T, H);
// cu_seqlens (N + 1): sequence n is tokens [cu[n], cu[n+1]), each from a zero state.
// Grouped heads: value head h reads q/k head h / (H / Hk) (HF's repeat_interleave).
// scale: 0 means 1/sqrt(K). Returns o (T, H, V). Gradients to q, k, v, g, beta.
Tensor chunk_gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                              const Tensor& beta, const Tensor& cu_seqlens, double scale = 0.0);

// Kimi Delta Attention (fla chunk_kda): as chunk_gated_delta_rule with the per-channel
// decay g (T, H, K).
Tensor chunk_kda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                 const Tensor& beta, const Tensor& cu_seqlens, double scale = 0.0);

// The generator's form of both (g (T, H) or (T, H, K) picks GDN or KDA): sequence n's
// tokens continue from absolute position start_pos[n] (N, i64) with the state in
// state (N, gated_delta_state_floats(H, K, V, per_channel)) f32 contiguous, updated in
// place. The same bits as the trainer's op for the same positions. No backward.
Tensor gated_delta_rule_cached(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                               const Tensor& beta, const Tensor& cu_seqlens,
                               const Tensor& start_pos, Tensor& state, double scale = 0.0);

// The same over a pool of slots (the engine's cache): state (num_slots,
// gated_delta_state_floats) f32 contiguous; sequence n resumes from and updates row
// slots[n]. snapshot_slots (N): -1, or the row that receives a copy of sequence n's slot
// as it stands before absolute position snapshot_pos[n] (N) (a prefix-cache snapshot at
// a KV block boundary; snapshot_pos[n] may be the end of the sequence's tokens).
// snapshot_slots and snapshot_pos may be undefined (no snapshots). Index tensors i32 or
// i64. Same bits as gated_delta_rule_cached. Errors as kernels::cpu::gated_delta_fwd_slots.
Tensor gated_delta_rule_slots(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                              const Tensor& beta, const Tensor& cu_seqlens, const Tensor& start_pos,
                              Tensor& state, const Tensor& slots, const Tensor& snapshot_slots,
                              const Tensor& snapshot_pos, double scale = 0.0);

// Causal depthwise conv1d over packed sequences (HF causal_conv1d_fn, no bias, no
// activation): x (T, C), w (C, W) → (T, C), zero history at each sequence start.
// Gradients to x and w.
Tensor causal_conv1d(const Tensor& x, const Tensor& w, const Tensor& cu_seqlens);

// The generator's conv1d: tail (N, W − 1, C) holds each sequence's last W − 1 inputs
// (zeros at position 0) and is updated in place. Same bits as causal_conv1d. No backward.
Tensor causal_conv1d_cached(const Tensor& x, const Tensor& w, const Tensor& cu_seqlens,
                            Tensor& tail);

// Gated RMSNorm (HF Qwen3NextRMSNormGated, fla FusedRMSNormGated, norm before gate):
//   y = w ⊙ x / sqrt(mean(x²) + eps) ⊙ silu(z).   x, z (..., D); w (D).
Tensor rms_norm_gated(const Tensor& x, const Tensor& z, const Tensor& w, double eps);

// softplus(x) = log(1 + exp(x)), x for x > 20 (torch.nn.functional.softplus, beta 1,
// threshold 20), element-wise with libm expf/log1pf; gradient sigmoid(x). f32 any shape.
Tensor softplus(const Tensor& x);

// L2 normalisation over the last dim as fla / HF l2norm: x · rsqrt(Σ x² + eps).
Tensor l2_normalize(const Tensor& x, double eps = 1e-6);

}  // namespace titan
