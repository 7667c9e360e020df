#include "titan/models/common/layers.h"
#include "titan/models/common/vocab_shard.h"

#include "titan/models/common/rope_yarn.h"

#include <cmath>

#include "titan/ops/bf16_compute.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/index.h"
#include "titan/ops/matmul.h"
#include "titan/ops/norm.h"
#include "titan/ops/rope.h"
#include "titan/ops/vocab_parallel.h"

namespace titan::models {

Linear::Linear(int64_t in, int64_t out, bool has_bias) : out_features_(out) {
  weight = register_parameter("weight", Tensor::zeros({out, in}));
  if (has_bias) bias = register_parameter("bias", Tensor::zeros({out}));
}

void PanelRepackable::repack_for_decode() {
  if (repacked_) return;
  // Inside a Bf16ComputeScope (a bf16-compute model) the panels are bf16.
  weight = bf16_compute() ? repack_linear_weight_bf16(weight) : repack_linear_weight(weight);
  replace_parameter("weight", weight);
  repacked_ = true;
}

Tensor Linear::forward(const Tensor& x) const {
  return repacked() ? linear_panels(x, weight, out_features_, bias) : linear(x, weight, bias);
}

Embedding::Embedding(int64_t num, int64_t dim) : num_(num) {
  weight = register_parameter("weight", Tensor::zeros({num, dim}));
}

Tensor Embedding::forward(const Tensor& ids) const {
  if (auto shard = vocab_shard(*this))  // vocabulary parallelism (vocab_shard.h)
    return embedding_vocab_shard(weight, ids, shard->vocab_start, shard->vocab_size);
  return repacked() ? embedding_panels(weight, num_, ids) : embedding(weight, ids);
}

RMSNorm::RMSNorm(int64_t dim, double eps_, bool unit_offset_) : eps(eps_), unit_offset(unit_offset_) {
  weight = register_parameter("weight", unit_offset ? Tensor::zeros({dim}) : Tensor::ones({dim}));
}

Tensor RMSNorm::forward(const Tensor& x) const {
  return rms_norm(x, unit_offset ? add(weight, 1.0) : weight, eps);
}

RopeCache build_rope_tables(const TransformerConfig& cfg) {
  if (cfg.rope_scaling.factor > 0 && cfg.rope_scaling.rope_type == "yarn")
    return yarn_rope_tables(cfg.max_position_embeddings, cfg.rotary_dim(), cfg.rope_theta, cfg.rope_scaling);
  titan::RopeScaling sc;
  if (cfg.rope_scaling.factor > 0) {
    sc.kind = titan::RopeScaling::Kind::llama3;
    sc.factor = cfg.rope_scaling.factor;
    sc.low_freq_factor = cfg.rope_scaling.low_freq_factor;
    sc.high_freq_factor = cfg.rope_scaling.high_freq_factor;
    sc.original_max_position_embeddings = cfg.rope_scaling.original_max_position_embeddings;
  }
  return rope_cache(cfg.max_position_embeddings, cfg.rotary_dim(), cfg.rope_theta, sc);
}

void Linear::init(const nn::InitContext& ctx, nn::InitRole role, int layer_id) {
  ctx.init(weight, role, layer_id);
  if (bias.defined()) nn::InitContext::constant(bias, 0.0);
}

void Embedding::init_weights(const nn::InitContext& ctx) { ctx.init(weight, nn::InitRole::embedding, -1); }

void RMSNorm::init_weights(const nn::InitContext&) {
  nn::InitContext::constant(weight, unit_offset ? 0.0 : 1.0);
}

}  // namespace titan::models
