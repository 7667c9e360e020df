#include "titan/models/mixers/kda.h"

#include <algorithm>
#include <cmath>

#include "titan/kernels/cpu/gated_delta.h"
#include "titan/models/mixers/linear_state.h"
#include "titan/ops/activation.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/join.h"
#include "titan/ops/linear_attention.h"
#include "titan/ops/norm.h"

namespace titan::models {

namespace {
// A sub-module holding one parameter `weight` (HF's conv1d / o_norm names).
class WeightHolder : public nn::Module {
 public:
  explicit WeightHolder(const Shape& s, double fill) { weight = register_parameter("weight", Tensor::full(s, fill)); }
  void init_weights(const nn::InitContext&) override {}
  Tensor weight;
};

// HF KimiLinearForgetGate's parameters: f_a_proj (D -> K), f_b_proj (K -> H·K), dt_bias
// (H·K), A_log (1, 1, H, 1).
class ForgetGate : public nn::Module {
 public:
  ForgetGate(int64_t D, int64_t H, int64_t K) {
    f_a_proj = register_module("f_a_proj", std::make_unique<Linear>(D, K, false));
    f_b_proj = register_module("f_b_proj", std::make_unique<Linear>(K, H * K, false));
    dt_bias = register_parameter("dt_bias", Tensor::zeros({H * K}));
    A_log = register_parameter("A_log", Tensor::zeros({1, 1, H, 1}));
  }
  void init_weights(const nn::InitContext&) override {}
  Linear *f_a_proj, *f_b_proj;
  Tensor dt_bias, A_log;
};
}  // namespace

KimiDeltaAttention::KimiDeltaAttention(const TransformerConfig& cfg, int layer_id)
    : layer_id_(layer_id),
      H_(cfg.linear_num_value_heads),
      K_(cfg.linear_key_head_dim),
      W_(cfg.linear_conv_kernel_dim),
      eps_(cfg.rms_norm_eps) {
  TITAN_CHECK(cfg.linear_num_key_heads == cfg.linear_num_value_heads &&
                  cfg.linear_key_head_dim == cfg.linear_value_head_dim,
              "model config: Kimi Delta Attention needs as many key as value heads ({} vs {}) and equal key and "
              "value head dims ({} vs {})", cfg.linear_num_key_heads, cfg.linear_num_value_heads,
              cfg.linear_key_head_dim, cfg.linear_value_head_dim);
  const int64_t D = cfg.hidden_size, HK = H_ * K_;
  q_proj = register_module("wq", std::make_unique<Linear>(D, HK, false));
  k_proj = register_module("wk", std::make_unique<Linear>(D, HK, false));
  v_proj = register_module("wv", std::make_unique<Linear>(D, HK, false));
  conv1d_weight = register_module("conv1d", std::make_unique<WeightHolder>(Shape{3 * HK, 1, W_}, 0.0))->weight;
  ForgetGate* fg = register_module("forget_gate", std::make_unique<ForgetGate>(D, H_, K_));
  f_a_proj = fg->f_a_proj;
  f_b_proj = fg->f_b_proj;
  dt_bias = fg->dt_bias;
  A_log = fg->A_log;
  b_proj = register_module("b_proj", std::make_unique<Linear>(D, H_, false));
  g_a_proj = register_module("g_a_proj", std::make_unique<Linear>(D, K_, false));
  g_b_proj = register_module("g_b_proj", std::make_unique<Linear>(K_, HK, false));
  o_norm_weight = register_module("o_norm", std::make_unique<WeightHolder>(Shape{K_}, 1.0))->weight;
  o_proj = register_module("wo", std::make_unique<Linear>(HK, D, false));
}

Tensor KimiDeltaAttention::forward(const Tensor& x, const ForwardBatch& batch, LayerCache* cache) const {
  const int64_t T = x.size(0), HK = H_ * K_;
  const LinearMixerState state(batch, cache, T, fmt::format("KimiDeltaAttention (layer {})", layer_id_));
  Tensor mixed = silu(state.conv1d(cat({q_proj->forward(x), k_proj->forward(x), v_proj->forward(x)}, 1),
                                   conv1d_weight.view({3 * HK, W_})));
  Tensor q = l2_normalize(mixed.narrow(1, 0, HK).reshape({T, H_, K_}), 1e-6);
  Tensor k = l2_normalize(mixed.narrow(1, HK, HK).reshape({T, H_, K_}), 1e-6);
  Tensor v = mixed.narrow(1, 2 * HK, HK).reshape({T, H_, K_});
  Tensor f = add(f_b_proj->forward(f_a_proj->forward(x)), dt_bias.expand({T, HK})).view({T, H_, K_});
  Tensor g = mul(neg(exp(A_log.view({1, H_, 1}))).expand({T, H_, K_}), softplus(f));
  Tensor beta = sigmoid(b_proj->forward(x));
  Tensor o = state.delta_rule(q, k, v, g, beta);  // (T, H, K)
  Tensor gate = g_b_proj->forward(g_a_proj->forward(x)).reshape({T * H_, K_});
  o = mul(rms_norm(o.reshape({T * H_, K_}), o_norm_weight, eps_), sigmoid(gate));
  return o_proj->forward(o.reshape({T, HK}));
}

LayerCacheSpec KimiDeltaAttention::cache_spec(int) const {
  LayerCacheSpec s;
  s.state.push_back({"conv_tail", {std::max<int64_t>(W_ - 1, 1), 3 * H_ * K_}});
  s.state.push_back({"recurrent", {kernels::cpu::gated_delta_state_floats(H_, K_, K_, true)}});
  return s;
}

void KimiDeltaAttention::init_weights(const nn::InitContext& ctx) {
  for (Linear* l : {q_proj, k_proj, v_proj, b_proj, g_a_proj, g_b_proj, f_a_proj, f_b_proj})
    l->init(ctx, nn::InitRole::in_proj, layer_id_);
  o_proj->init(ctx, nn::InitRole::out_proj, layer_id_);
  ctx.init(conv1d_weight, nn::InitRole::in_proj, layer_id_);
  nn::InitContext::constant(o_norm_weight, 1.0);
  const int64_t HK = H_ * K_;
  // dt = exp(log 1e-3 + (log 1e-1 − log 1e-3)·(i + 0.5)/HK), dt_bias = dt + log(−expm1(−dt)).
  std::vector<float> db(static_cast<size_t>(HK)), al(static_cast<size_t>(H_));
  for (int64_t i = 0; i < HK; ++i) {
    const double dt = std::exp(std::log(1e-3) + (std::log(1e-1) - std::log(1e-3)) * (i + 0.5) / HK);
    db[static_cast<size_t>(i)] = static_cast<float>(dt + std::log(-std::expm1(-dt)));
  }
  for (int64_t h = 0; h < H_; ++h) al[static_cast<size_t>(h)] = static_cast<float>(std::log(1.0 + 15.0 * (h + 0.5) / H_));
  dt_bias.copy_(Tensor::from_vector(db, {HK}));
  A_log.copy_(Tensor::from_vector(al, {1, 1, H_, 1}));
}

void KimiDeltaAttention::repack_for_decode() {
  for (Linear* l : {q_proj, k_proj, v_proj, b_proj, g_a_proj, g_b_proj, o_proj, f_a_proj, f_b_proj})
    l->repack_for_decode();
}

}  // namespace titan::models
