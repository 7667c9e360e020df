// Gated DeltaNet, the `gdn` mixer of Qwen3-Next's linear_attention layers (HF
// Qwen3NextGatedDeltaNet; Yang, Kautz & Hatamizadeh 2024). Parameter names follow HF:
// in_proj_qkvz, in_proj_ba, conv1d, dt_bias, A_log, norm, out_proj.
//
//   qkvz = in_proj_qkvz(x), ba = in_proj_ba(x)  (grouped per q/k head, HF's ordering)
//   q, k, v = silu(causal_conv1d(cat(q, k, v)))          depthwise, linear_conv_kernel_dim taps
//   q, k = l2_normalize(q), l2_normalize(k)              (eps 1e-6)
//   beta = sigmoid(b), g = −exp(A_log) · softplus(a + dt_bias)
//   o = chunk_gated_delta_rule(q, k, v, g, beta)         (titan/ops/linear_attention.h)
//   out = out_proj(rms_norm_gated(o, z, norm.weight))
#pragma once
#include "titan/models/common/layer_spec.h"
#include "titan/models/common/layers.h"

namespace titan::models {

class GatedDeltaNet : public Mixer {
 public:
  GatedDeltaNet(const TransformerConfig& cfg, int layer_id);
  // x (T, D) -> (T, D). Trainer path (batch.kv null): every sequence of
  // batch.cu_seqlens from a zero state. Generator path: sequence s resumes from state
  // row batch.state_slots[s] of cache->state (conv tail, delta-rule slot), updates it,
  // and writes the snapshot batch.snapshot_slots asks for; the same arithmetic as the
  // trainer's (chunks aligned to absolute positions), so the same bits per position.
  // Throws titan::Error when the generator path lacks its slots.
  Tensor forward(const Tensor& x, const ForwardBatch& batch, LayerCache* cache) const override;
  // Per sequence slot: "conv_tail" (W − 1, conv_dim) and "recurrent" (the delta rule's
  // chunk state, kernels::cpu::gated_delta_state_floats); no paged tensors.
  LayerCacheSpec cache_spec(int block_size) const override;
  // in_proj_*: in_proj role, out_proj: out_proj role, conv1d: in_proj role,
  // dt_bias 1, A_log = log(A) for A spread evenly over HF's uniform(1, 16), norm 1.
  void init_weights(const nn::InitContext& ctx) override;
  void repack_for_decode() override;
  Linear *in_proj_qkvz, *in_proj_ba, *out_proj;
  Tensor conv1d_weight;  // (conv_dim, 1, W), registered as conv1d.weight
  Tensor dt_bias, A_log;  // (Hv)
  Tensor norm_weight;     // (Dv), registered as norm.weight

 private:
  int layer_id_;
  int64_t Hk_, Hv_, Dk_, Dv_, W_;
  double eps_;
};

}  // namespace titan::models
