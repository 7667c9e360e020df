// YaRN RoPE scaling (Peng, Quesnelle, Fan & Shippole 2023, "YaRN: Efficient Context
// Window Extension of Large Language Models"), in the form DeepSeek-V3's config.json uses
// (rope_scaling type "yarn" with beta_fast, beta_slow, mscale, mscale_all_dim;
// transformers' _compute_yarn_parameters and DeepSeek-V3's yarn_get_mscale).
#pragma once
#include <cstdint>

#include "titan/models/common/config.h"
#include "titan/ops/rope.h"

namespace titan::models {

// 0.1 · m · ln(s) + 1 for s > 1, else 1 (YaRN's attention temperature).
double yarn_get_mscale(double scale, double m = 1.0);

// The cos/sin multiplier: mscale(factor, mscale) / mscale(factor, mscale_all_dim) when
// both are set (non-zero), else mscale(factor).
double yarn_attention_factor(const RopeScaling& s);

// The softmax-scale multiplier MLA applies on top of qk_head_dim^-0.5:
// mscale(factor, mscale_all_dim)² when mscale_all_dim is set, else 1.
double yarn_softmax_scale_factor(const RopeScaling& s);

// fp32 tables (P, R/2): cos/sin(p · inv_freq[i]) · yarn_attention_factor, computed in
// double and rounded once. inv_freq blends the interpolated (theta^(2i/R) · factor)⁻¹ and
// extrapolated theta^(−2i/R) frequencies with a linear ramp over the dims between the
// correction range floor(dim(beta_fast)) .. ceil(dim(beta_slow)) of
// original_max_position_embeddings (not rounded when s.truncate is false, as gpt-oss). Throws titan::Error naming the field for factor <= 0,
// beta_fast < beta_slow or a non-positive original_max_position_embeddings.
RopeCache yarn_rope_tables(int64_t P, int64_t R, double theta, const RopeScaling& s);

}  // namespace titan::models
