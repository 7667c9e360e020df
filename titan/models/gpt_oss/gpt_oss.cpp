// gpt-oss family (OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card"; HF
// GptOssForCausalLM, model_type gpt_oss): GQA attention (head_dim 64) with q/k/v/o
// biases and one learned sink logit per query head, sliding-window (128) and full
// attention layers alternating (layer_types), YaRN RoPE with an unrounded correction
// range (rope_scaling.truncate = false); every layer a mixture of experts: a router
// with a bias whose K largest logits are softmaxed (scoring_func softmax_topk), experts
// with biases on both projections and the clamped SwiGLU of ops/activation.h
// swiglu_oai (swiglu_limit 7, swiglu_alpha 1.702); no shared expert, untied LM head.
// Every one of these is a config flag of the shared decoder (models/common/config.h).
//
// HF tensors of a layer's experts (transformers GptOssExperts) and their titan
// counterparts (models/ffn/moe.h GroupedExperts):
//   mlp.router.weight (E, D), .bias (E)   <-> moe.router.gate.weight, .bias
//   mlp.experts.gate_up_proj (E, D, 2F)   <-> w1 (E, F, D) = its even columns transposed,
//                                              w3 (E, F, D) = its odd columns transposed
//   mlp.experts.gate_up_proj_bias (E, 2F) <-> b1 = even entries, b3 = odd entries
//   mlp.experts.down_proj (E, F, D)       <-> w2 (E, D, F) transposed
//   mlp.experts.down_proj_bias (E, D)     <-> b2
#include <cmath>
#include <nlohmann/json.hpp>

#include "titan/core/error.h"
#include "titan/models/family.h"

namespace titan::models {

namespace {

double num_field(const nlohmann::json& x, const char* k, double def) {
  if (!x.contains(k)) return def;
  TITAN_CHECK(x.at(k).is_number(), "config.json: field '{}' must be a number, got {}", k, x.at(k).dump());
  return x.at(k).get<double>();
}

int64_t int_field(const nlohmann::json& x, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (x.contains(k)) {
      TITAN_CHECK(x.at(k).is_number_integer(), "config.json: field '{}' must be an integer, got {}", k, x.at(k).dump());
      return x.at(k).get<int64_t>();
    }
  fail("config.json: GptOssForCausalLM needs the field '{}'", *keys.begin());
}

void set_gpt_oss_flags(TransformerConfig& c) {
  c.attention_sinks = true;
  c.router_bias = true;
  c.expert_proj_bias = true;
  c.scoring_func = "softmax_topk";
  c.expert_act = "swiglu_oai";
  c.n_shared_experts = 0;
}

void read_gpt_oss_fields(const HFConfig& hf, TransformerConfig& c) {
  const nlohmann::json& x = hf.extra;
  set_gpt_oss_flags(c);
  c.num_experts = int_field(x, {"num_local_experts", "num_experts"});
  c.num_experts_per_tok = int_field(x, {"num_experts_per_tok", "experts_per_token"});
  c.moe_intermediate_size = hf.intermediate_size;
  c.swiglu_limit = num_field(x, "swiglu_limit", 7.0);
  c.swiglu_alpha = num_field(x, "swiglu_alpha", 1.702);
  const double window = x.contains("sliding_window") && x.at("sliding_window").is_null() ? 0.0
                                                                                          : num_field(x, "sliding_window", 128);
  TITAN_CHECK(window >= 0 && window == std::floor(window) && window <= 1 << 30,
              "config.json: field 'sliding_window' must be an integer >= 1 or null, got {}", window);
  c.sliding_window = static_cast<int64_t>(window);
  if (x.contains("layer_types")) {
    TITAN_CHECK(x.at("layer_types").is_array(), "config.json: field 'layer_types' must be a list of strings");
    c.layer_types = x.at("layer_types").get<std::vector<std::string>>();
  } else {
    for (int64_t l = 0; l < hf.num_hidden_layers; ++l)
      c.layer_types.push_back((l + 1) % 2 ? "sliding_attention" : "full_attention");
  }
  // transformers adds the Switch load-balancing loss only with output_router_logits.
  const bool router_logits = x.contains("output_router_logits") && x.at("output_router_logits").is_boolean() &&
                             x.at("output_router_logits").get<bool>();
  TITAN_CHECK(!router_logits || num_field(x, "router_aux_loss_coef", 0.9) == 0.0,
              "config.json: output_router_logits = true with router_aux_loss_coef = {} is not supported (the Switch "
              "load-balancing loss is not modelled)", num_field(x, "router_aux_loss_coef", 0.9));
}

void write_gpt_oss_fields(const TransformerConfig& c, HFConfig& h) {
  h.intermediate_size = c.moe_intermediate_size;
  h.extra["num_local_experts"] = c.num_experts;
  h.extra["num_experts_per_tok"] = c.num_experts_per_tok;
  h.extra["swiglu_limit"] = c.swiglu_limit;
  h.extra["swiglu_alpha"] = c.swiglu_alpha;
  h.extra["sliding_window"] = c.sliding_window;
  h.extra["layer_types"] = c.layer_types;
  h.extra["output_router_logits"] = false;
  h.extra["router_aux_loss_coef"] = 0.0;
}

// "layers.{l}.moe.<rest>" -> l and rest.
bool moe_name(const std::string& name, std::string& layer, std::string& rest) {
  if (name.rfind("layers.", 0) != 0) return false;
  const size_t dot = name.find('.', 7);
  if (dot == std::string::npos || name.compare(dot + 1, 4, "moe.") != 0) return false;
  layer = name.substr(7, dot - 7);
  rest = name.substr(dot + 5);
  return true;
}

Tensor f32_of(const std::map<std::string, Tensor>& hf, const std::string& key, const std::vector<int64_t>& shape,
              const std::string& source) {
  auto it = hf.find(key);
  TITAN_CHECK(it != hf.end(), "{}: missing tensor '{}' (expected shape {})", source, key, shape_str(shape));
  TITAN_CHECK(it->second.shape() == shape, "{}: tensor '{}' has shape {}, the model expects {}", source, key,
              shape_str(it->second.shape()), shape_str(shape));
  TITAN_CHECK(is_floating(it->second.dtype()), "{}: tensor '{}' has dtype {}, expected a floating dtype", source,
              key, dtype_name(it->second.dtype()));
  return it->second.to(DType::f32).contiguous();
}

}  // namespace

bool load_gpt_oss_param(const std::string& name, Tensor p, const std::map<std::string, Tensor>& hf,
                        const std::string& source) {
  std::string l, rest;
  if (!moe_name(name, l, rest)) return false;
  const std::string pre = "model.layers." + l + ".mlp.";
  if (rest == "router.gate.weight" || rest == "router.gate.bias") {
    p.copy_(f32_of(hf, pre + (rest == "router.gate.weight" ? "router.weight" : "router.bias"), p.shape(), source));
    return true;
  }
  const bool gate_up = rest == "experts.w1" || rest == "experts.w3", gu_bias = rest == "experts.b1" || rest == "experts.b3";
  if (!gate_up && !gu_bias && rest != "experts.w2" && rest != "experts.b2") return false;
  const int64_t E = p.size(0);
  std::vector<float> v(static_cast<size_t>(p.numel()));
  if (rest == "experts.b2") {
    p.copy_(f32_of(hf, pre + "experts.down_proj_bias", p.shape(), source));
    return true;
  }
  if (gu_bias) {  // b (E, F) from gate_up_proj_bias (E, 2F)
    const int64_t F = p.size(1), odd = rest == "experts.b3";
    Tensor s = f32_of(hf, pre + "experts.gate_up_proj_bias", {E, 2 * F}, source);
    const float* ps = s.data<float>();
    for (int64_t e = 0; e < E; ++e)
      for (int64_t f = 0; f < F; ++f) v[static_cast<size_t>(e * F + f)] = ps[e * 2 * F + 2 * f + odd];
  } else if (gate_up) {  // w (E, F, D) from gate_up_proj (E, D, 2F)
    const int64_t F = p.size(1), D = p.size(2), odd = rest == "experts.w3";
    Tensor s = f32_of(hf, pre + "experts.gate_up_proj", {E, D, 2 * F}, source);
    const float* ps = s.data<float>();
    for (int64_t e = 0; e < E; ++e)
      for (int64_t f = 0; f < F; ++f)
        for (int64_t d = 0; d < D; ++d)
          v[static_cast<size_t>((e * F + f) * D + d)] = ps[(e * D + d) * 2 * F + 2 * f + odd];
  } else {  // w2 (E, D, F) from down_proj (E, F, D)
    const int64_t D = p.size(1), F = p.size(2);
    Tensor s = f32_of(hf, pre + "experts.down_proj", {E, F, D}, source);
    const float* ps = s.data<float>();
    for (int64_t e = 0; e < E; ++e)
      for (int64_t d = 0; d < D; ++d)
        for (int64_t f = 0; f < F; ++f) v[static_cast<size_t>((e * D + d) * F + f)] = ps[(e * F + f) * D + d];
  }
  p.copy_(Tensor::from_vector(v, p.shape()));
  return true;
}

bool export_gpt_oss_params(const std::string& name, const std::map<std::string, Tensor>& params,
                           std::map<std::string, Tensor>& out) {
  std::string l, rest;
  if (!moe_name(name, l, rest)) return false;
  const std::string pre = "model.layers." + l + ".mlp.";
  const std::string tp = "layers." + l + ".moe.experts.";
  auto get = [&](const char* w) { return params.at(tp + w).detach().contiguous(); };
  if (rest == "router.gate.weight" || rest == "router.gate.bias") {
    out[pre + (rest == "router.gate.weight" ? "router.weight" : "router.bias")] = params.at(name).detach();
  } else if (rest == "experts.w1") {  // writes gate_up_proj from w1 and w3
    Tensor w1 = get("w1"), w3 = get("w3");
    const int64_t E = w1.size(0), F = w1.size(1), D = w1.size(2);
    std::vector<float> v(static_cast<size_t>(E * D * 2 * F));
    const float* a = w1.data<float>();
    const float* b = w3.data<float>();
    for (int64_t e = 0; e < E; ++e)
      for (int64_t f = 0; f < F; ++f)
        for (int64_t d = 0; d < D; ++d) {
          v[static_cast<size_t>((e * D + d) * 2 * F + 2 * f)] = a[(e * F + f) * D + d];
          v[static_cast<size_t>((e * D + d) * 2 * F + 2 * f + 1)] = b[(e * F + f) * D + d];
        }
    out[pre + "experts.gate_up_proj"] = Tensor::from_vector(v, {E, D, 2 * F});
  } else if (rest == "experts.b1") {
    Tensor b1 = get("b1"), b3 = get("b3");
    const int64_t E = b1.size(0), F = b1.size(1);
    std::vector<float> v(static_cast<size_t>(E * 2 * F));
    for (int64_t i = 0; i < E * F; ++i) {
      v[static_cast<size_t>(2 * i)] = b1.data<float>()[i];
      v[static_cast<size_t>(2 * i + 1)] = b3.data<float>()[i];
    }
    out[pre + "experts.gate_up_proj_bias"] = Tensor::from_vector(v, {E, 2 * F});
  } else if (rest == "experts.w2") {
    out[pre + "experts.down_proj"] = get("w2").transpose(1, 2).contiguous();
  } else if (rest == "experts.b2") {
    out[pre + "experts.down_proj_bias"] = get("b2");
  } else if (rest != "experts.w3" && rest != "experts.b3") {
    return false;
  }
  return true;
}

Family make_gpt_oss_family() {
  Family f;
  f.name = "gpt_oss";
  f.hf_architecture = "GptOssForCausalLM";
  f.hf_model_type = "gpt_oss";
  f.init_style = nn::InitStyle::gpt2;  // normal(0.02) (HF initializer_range)
  f.read_hf = read_gpt_oss_fields;
  f.write_hf = write_gpt_oss_fields;
  TransformerConfig base;
  base.family = "gpt_oss";
  set_gpt_oss_flags(base);
  base.attention_bias = true;
  base.rms_norm_eps = 1e-5;
  base.rope_theta = 150000;
  base.rope_scaling.rope_type = "yarn";
  base.rope_scaling.factor = 32.0;
  base.rope_scaling.beta_fast = 32.0;
  base.rope_scaling.beta_slow = 1.0;
  base.rope_scaling.original_max_position_embeddings = 4096;
  base.rope_scaling.truncate = false;
  base.tie_word_embeddings = false;
  base.vocab_size = 201088;
  base.max_position_embeddings = 131072;
  base.sliding_window = 128;
  base.eos_token_id = 200002;
  auto sized = [&](int64_t D, int64_t F, int64_t L, int64_t H, int64_t Hkv, int64_t E, int64_t K) {
    TransformerConfig c = base;
    c.hidden_size = D;
    c.intermediate_size = F;  // HF intermediate_size: the width of one expert
    c.moe_intermediate_size = F;
    c.num_hidden_layers = L;
    c.num_attention_heads = H;
    c.num_key_value_heads = Hkv;
    c.head_dim = 64;
    c.num_experts = E;
    c.num_experts_per_tok = K;
    for (int64_t l = 0; l < L; ++l) c.layer_types.push_back((l + 1) % 2 ? "sliding_attention" : "full_attention");
    return c;
  };
  // Small debug model: 2 sliding (window 32) / full pairs, 8 experts of which 2 per token,
  // YaRN factor 4 over 1024 positions.
  TransformerConfig debug = sized(256, 256, 4, 4, 2, 8, 2);
  debug.vocab_size = 2048;
  debug.max_position_embeddings = 4096;
  debug.sliding_window = 32;
  debug.rope_theta = 10000;
  debug.rope_scaling.factor = 4.0;
  debug.rope_scaling.original_max_position_embeddings = 1024;
  debug.eos_token_id = -1;
  f.flavors["debugmodel"] = debug;
  // openai/gpt-oss-20b and openai/gpt-oss-120b config.json.
  f.flavors["20b"] = sized(2880, 2880, 24, 64, 8, 32, 4);
  f.flavors["120b"] = sized(2880, 2880, 36, 64, 8, 128, 4);
  return f;
}

}  // namespace titan::models
