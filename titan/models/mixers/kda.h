// Kimi Delta Attention, the `kda` mixer of Kimi Linear's linear_attention layers (HF
// KimiLinearDeltaAttention; Kimi Team 2025, "Kimi Linear"): the gated delta rule with a
// per-channel (diagonal) decay instead of Gated DeltaNet's scalar one. H heads of
// K = linear_key_head_dim dims for q, k and v (linear_num_key_heads ==
// linear_num_value_heads == H, linear_key_head_dim == linear_value_head_dim). Parameter
// names follow HF (self_attn.*) with the projections under titan's attention names:
// wq, wk, wv (HF q_proj, k_proj, v_proj), conv1d, forget_gate.{f_a_proj, f_b_proj,
// dt_bias, A_log}, b_proj, g_a_proj, g_b_proj, o_norm, wo (HF o_proj).
//
//   q, k, v = silu(causal_conv1d(cat(q_proj x, k_proj x, v_proj x)))   depthwise, W taps
//   q, k = l2_normalize(q), l2_normalize(k)                             (eps 1e-6)
//   g = −exp(A_log[h]) · softplus(f_b_proj(f_a_proj x) + dt_bias)       (T, H, K) log decay
//   beta = sigmoid(b_proj x)                                            (T, H)
//   o = chunk_kda(q, k, v, g, beta)                                     (titan/ops/linear_attention.h)
//   out = o_proj(rms_norm(o, o_norm.weight) · sigmoid(g_b_proj(g_a_proj x)))
#pragma once
#include "titan/models/common/layer_spec.h"
#include "titan/models/common/layers.h"

namespace titan::models {

class KimiDeltaAttention : public Mixer {
 public:
  KimiDeltaAttention(const TransformerConfig& cfg, int layer_id);
  // x (T, D) -> (T, D); trainer and generator paths as GatedDeltaNet::forward (the
  // state slots of cache_spec on the generator path, the same bits per position).
  Tensor forward(const Tensor& x, const ForwardBatch& batch, LayerCache* cache) const override;
  // Per sequence slot: "conv_tail" (W − 1, 3·H·K) and "recurrent"
  // (kernels::cpu::gated_delta_state_floats(H, K, K, per_channel)).
  LayerCacheSpec cache_spec(int block_size) const override;
  // Projections: in_proj role (o_proj: out_proj), conv1d in_proj; dt_bias as fla /
  // HF (inverse softplus of dt spread log-evenly over [1e-3, 1e-1]), A_log = log(A) for A
  // spread evenly over uniform(1, 16), o_norm 1.
  void init_weights(const nn::InitContext& ctx) override;
  void repack_for_decode() override;
  Linear *q_proj, *k_proj, *v_proj, *b_proj, *g_a_proj, *g_b_proj, *o_proj, *f_a_proj, *f_b_proj;
  Tensor conv1d_weight;   // (3·H·K, 1, W), registered as conv1d.weight
  Tensor dt_bias;         // (H·K), forget_gate.dt_bias
  Tensor A_log;           // (1, 1, H, 1), forget_gate.A_log
  Tensor o_norm_weight;   // (K), o_norm.weight

 private:
  int layer_id_;
  int64_t H_, K_, W_;
  double eps_;
};

}  // namespace titan::models
