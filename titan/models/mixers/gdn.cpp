#include "titan/models/mixers/gdn.h"

#include <algorithm>
#include <cmath>

#include "titan/kernels/cpu/gated_delta.h"
#include "titan/models/mixers/linear_state.h"
#include "titan/ops/activation.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/join.h"
#include "titan/ops/linear_attention.h"

namespace titan::models {

namespace {
// A sub-module holding one parameter `weight` (HF's conv1d / norm names).
class WeightHolder : public nn::Module {
 public:
  explicit WeightHolder(const Shape& s, double fill) {
    weight = register_parameter("weight", Tensor::full(s, fill));
  }
  void init_weights(const nn::InitContext&) override {}
  Tensor weight;
};
}  // namespace

GatedDeltaNet::GatedDeltaNet(const TransformerConfig& cfg, int layer_id)
    : layer_id_(layer_id),
      Hk_(cfg.linear_num_key_heads),
      Hv_(cfg.linear_num_value_heads),
      Dk_(cfg.linear_key_head_dim),
      Dv_(cfg.linear_value_head_dim),
      W_(cfg.linear_conv_kernel_dim),
      eps_(cfg.rms_norm_eps) {
  const int64_t D = cfg.hidden_size, kd = Hk_ * Dk_, vd = Hv_ * Dv_;
  in_proj_qkvz = register_module("in_proj_qkvz", std::make_unique<Linear>(D, 2 * kd + 2 * vd, false));
  in_proj_ba = register_module("in_proj_ba", std::make_unique<Linear>(D, 2 * Hv_, false));
  conv1d_weight = register_module("conv1d", std::make_unique<WeightHolder>(Shape{2 * kd + vd, 1, W_}, 0.0))->weight;
  dt_bias = register_parameter("dt_bias", Tensor::ones({Hv_}));
  A_log = register_parameter("A_log", Tensor::zeros({Hv_}));
  norm_weight = register_module("norm", std::make_unique<WeightHolder>(Shape{Dv_}, 1.0))->weight;
  out_proj = register_module("out_proj", std::make_unique<Linear>(vd, D, false));
}

Tensor GatedDeltaNet::forward(const Tensor& x, const ForwardBatch& batch, LayerCache* cache) const {
  const int64_t T = x.size(0), G = Hv_ / Hk_, kd = Hk_ * Dk_, vd = Hv_ * Dv_;
  // HF fix_query_key_value_ordering: per q/k head [q (Dk), k (Dk), v (G·Dv), z (G·Dv)].
  Tensor qkvz = in_proj_qkvz->forward(x).view({T, Hk_, 2 * Dk_ + 2 * G * Dv_});
  Tensor q = qkvz.narrow(2, 0, Dk_).reshape({T, kd});
  Tensor k = qkvz.narrow(2, Dk_, Dk_).reshape({T, kd});
  Tensor v = qkvz.narrow(2, 2 * Dk_, G * Dv_).reshape({T, vd});
  Tensor z = qkvz.narrow(2, 2 * Dk_ + G * Dv_, G * Dv_).reshape({T * Hv_, Dv_});
  Tensor ba = in_proj_ba->forward(x).view({T, Hk_, 2 * G});
  Tensor b = ba.narrow(2, 0, G).reshape({T, Hv_});
  Tensor a = ba.narrow(2, G, G).reshape({T, Hv_});
  const int64_t C = 2 * kd + vd;
  const Tensor w = conv1d_weight.view({C, W_});
  const LinearMixerState state(batch, cache, T, fmt::format("GatedDeltaNet (layer {})", layer_id_));
  Tensor mixed = state.conv1d(cat({q, k, v}, 1), w);
  mixed = silu(mixed);
  q = l2_normalize(mixed.narrow(1, 0, kd).reshape({T, Hk_, Dk_}), 1e-6);
  k = l2_normalize(mixed.narrow(1, kd, kd).reshape({T, Hk_, Dk_}), 1e-6);
  v = mixed.narrow(1, 2 * kd, vd).reshape({T, Hv_, Dv_});
  Tensor beta = sigmoid(b);
  Tensor g = mul(neg(exp(A_log)).expand({T, Hv_}), softplus(add(a, dt_bias.expand({T, Hv_}))));
  Tensor o = state.delta_rule(q, k, v, g, beta);
  o = rms_norm_gated(o.reshape({T * Hv_, Dv_}), z, norm_weight, eps_);
  return out_proj->forward(o.reshape({T, vd}));
}

LayerCacheSpec GatedDeltaNet::cache_spec(int) const {
  LayerCacheSpec s;
  // A kernel of width 1 keeps no tail; the slot is then one unused row.
  s.state.push_back({"conv_tail", {std::max<int64_t>(W_ - 1, 1), 2 * Hk_ * Dk_ + Hv_ * Dv_}});
  s.state.push_back({"recurrent", {kernels::cpu::gated_delta_state_floats(Hv_, Dk_, Dv_, false)}});
  return s;
}

void GatedDeltaNet::init_weights(const nn::InitContext& ctx) {
  in_proj_qkvz->init(ctx, nn::InitRole::in_proj, layer_id_);
  in_proj_ba->init(ctx, nn::InitRole::in_proj, layer_id_);
  out_proj->init(ctx, nn::InitRole::out_proj, layer_id_);
  ctx.init(conv1d_weight, nn::InitRole::in_proj, layer_id_);
  nn::InitContext::constant(dt_bias, 1.0);
  nn::InitContext::constant(norm_weight, 1.0);
  // A = 1 + 15·(i + 0.5) / Hv spread over HF's uniform(1, 16) range, deterministic.
  std::vector<float> al(static_cast<size_t>(Hv_));
  for (int64_t i = 0; i < Hv_; ++i)
    al[static_cast<size_t>(i)] = static_cast<float>(std::log(1.0 + 15.0 * (i + 0.5) / Hv_));
  A_log.copy_(Tensor::from_vector(al, {Hv_}));
}

void GatedDeltaNet::repack_for_decode() {
  for (Linear* l : {in_proj_qkvz, in_proj_ba, out_proj}) l->repack_for_decode();
}

}  // namespace titan::models
