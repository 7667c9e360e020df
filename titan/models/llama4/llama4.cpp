// Llama 4 text family (Meta 2025, "The Llama 4 herd"; HF Llama4ForCausalLM, model_type
// llama4_text, configuration_llama4.Llama4TextConfig / modeling_llama4.py): the Llama
// block with iRoPE, i.e. interleaved-pair RoPE (Meta's complex RoPE) on 3 of 4 layers
// with chunked local attention (attention_chunk_size) and a weightless RMS norm of q and
// k after RoPE (use_qk_norm), and every 4th layer NoPE with global attention and
// attention temperature tuning; MoE feed-forwards on every interleave_moe_layer_step-th
// layer: a top-1 sigmoid router whose weight scales the expert's input
// (score_before_experts), plus one shared expert of the same width; dense layers are
// SwiGLUs of intermediate_size_mlp.
//
// HF -> titan names of the sizes: intermediate_size (expert and shared-expert width) is
// moe_intermediate_size, intermediate_size_mlp (dense layers) is intermediate_size,
// num_local_experts is num_experts.
//
// Checkpoint layout (what transformers' save_pretrained writes): the feed-forward sits
// under model.layers.{l}.feed_forward: gate_proj/up_proj/down_proj (dense), router.weight
// (E, D), shared_expert.{gate,up,down}_proj, experts.gate_up_proj (E, D, 2F) = [gate | up]
// along the last dim and experts.down_proj (E, F, D) (each the transpose of titan's
// stacked w1/w3 and w2).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "titan/core/error.h"
#include "titan/models/family.h"
#include "titan/ops/join.h"

namespace titan::models {

namespace {

constexpr const char* kWhere = "config.json (Llama4ForCausalLM)";

int64_t int_field(const nlohmann::json& x, const char* k, int64_t def) {
  if (!x.contains(k) || x.at(k).is_null()) return def;
  TITAN_CHECK(x.at(k).is_number_integer(), "{}: '{}' must be an integer, got {}", kWhere, k, x.at(k).dump());
  return x.at(k).get<int64_t>();
}
double num_field(const nlohmann::json& x, const char* k, double def) {
  if (!x.contains(k) || x.at(k).is_null()) return def;
  TITAN_CHECK(x.at(k).is_number(), "{}: '{}' must be a number, got {}", kWhere, k, x.at(k).dump());
  return x.at(k).get<double>();
}
bool bool_field(const nlohmann::json& x, const char* k, bool def) {
  if (!x.contains(k) || x.at(k).is_null()) return def;
  TITAN_CHECK(x.at(k).is_boolean(), "{}: '{}' must be true or false, got {}", kWhere, k, x.at(k).dump());
  return x.at(k).get<bool>();
}
std::vector<int64_t> int_list(const nlohmann::json& x, const char* k) {
  if (!x.contains(k) || x.at(k).is_null()) return {};
  const nlohmann::json& v = x.at(k);
  TITAN_CHECK(v.is_array(), "{}: '{}' must be a list of integers, got {}", kWhere, k, v.dump());
  std::vector<int64_t> out;
  for (const nlohmann::json& e : v) {
    TITAN_CHECK(e.is_number_integer(), "{}: '{}' must be a list of integers, got {}", kWhere, k, v.dump());
    out.push_back(e.get<int64_t>());
  }
  return out;
}

// Llama4TextConfig's fields beyond HFConfig's, with the HF class defaults and
// __post_init__'s derived values (no_rope_layers, moe_layers, layer_types).
void read_llama4_fields(const HFConfig& hf, TransformerConfig& c) {
  const nlohmann::json& x = hf.extra;
  const int64_t L = hf.num_hidden_layers;
  c.moe_intermediate_size = hf.intermediate_size;
  c.intermediate_size = int_field(x, "intermediate_size_mlp", 16384);
  c.num_experts = int_field(x, "num_local_experts", 16);
  c.num_experts_per_tok = int_field(x, "num_experts_per_tok", 1);
  TITAN_CHECK(c.num_experts >= 1, "{}: num_local_experts must be >= 1, got {}", kWhere, c.num_experts);
  TITAN_CHECK(c.num_experts_per_tok >= 1 && c.num_experts_per_tok <= c.num_experts,
              "{}: num_experts_per_tok must be in [1, num_local_experts = {}], got {}", kWhere, c.num_experts,
              c.num_experts_per_tok);
  // MoE layers: moe_layers, else every interleave_moe_layer_step-th (step - 1, 2 step - 1, ...).
  const int64_t step = int_field(x, "interleave_moe_layer_step", 1);
  TITAN_CHECK(step >= 1, "{}: interleave_moe_layer_step must be >= 1, got {}", kWhere, step);
  c.decoder_sparse_step = step;
  c.mlp_only_layers.clear();
  if (x.contains("moe_layers") && !x.at("moe_layers").is_null()) {
    const std::vector<int64_t> moe = int_list(x, "moe_layers");
    for (int64_t l : moe)
      TITAN_CHECK(l >= 0 && l < L, "{}: moe_layers has layer {} outside [0, {})", kWhere, l, L);
    c.decoder_sparse_step = 1;
    for (int64_t l = 0; l < L; ++l)
      if (std::find(moe.begin(), moe.end(), l) == moe.end()) c.mlp_only_layers.push_back(l);
  }
  c.scoring_func = "sigmoid";
  c.norm_topk_prob = false;
  c.n_shared_experts = 1;
  c.score_before_experts = true;
  // Llama4TextConfig's router_aux_loss_coef is the Switch-style loss of
  // output_router_logits, not titan's sequence loss: it stays 0 and round-trips in extra.
  c.router_aux_loss_coef = 0.0;
  TITAN_CHECK(num_field(x, "router_jitter_noise", 0.0) == 0.0,
              "{}: router_jitter_noise = {} is not supported (0)", kWhere, num_field(x, "router_jitter_noise", 0.0));
  TITAN_CHECK(!hf.attention_bias, "{}: attention_bias = true is not supported (o_proj has no bias in titan)", kWhere);
  const std::string act = x.contains("hidden_act") && x.at("hidden_act").is_string()
                              ? x.at("hidden_act").get<std::string>() : "silu";
  TITAN_CHECK(act == "silu", "{}: hidden_act '{}' is not supported (silu)", kWhere, act);

  // iRoPE.
  c.rope_interleave_gqa = true;
  c.use_qk_norm = bool_field(x, "use_qk_norm", true);
  c.no_rope_layers = int_list(x, "no_rope_layers");
  if (c.no_rope_layers.empty()) {  // HF: a falsy list means the interval default
    const int64_t every = int_field(x, "no_rope_layer_interval", 4);
    TITAN_CHECK(every >= 1, "{}: no_rope_layer_interval must be >= 1, got {}", kWhere, every);
    for (int64_t l = 0; l < L; ++l) c.no_rope_layers.push_back((l + 1) % every != 0 ? 1 : 0);
  }
  TITAN_CHECK(static_cast<int64_t>(c.no_rope_layers.size()) >= L,
              "{}: no_rope_layers has {} entries, num_hidden_layers is {}", kWhere, c.no_rope_layers.size(), L);
  c.no_rope_layers.resize(static_cast<size_t>(L));  // HF: "at least the same length"
  c.attention_chunk_size = 0;
  const bool chunked = !x.contains("attention_chunk_size") || !x.at("attention_chunk_size").is_null();
  if (chunked) {
    c.attention_chunk_size = int_field(x, "attention_chunk_size", 8192);
    TITAN_CHECK(c.attention_chunk_size >= 1, "{}: attention_chunk_size must be >= 1 (or null = off), got {}", kWhere,
                c.attention_chunk_size);
  }
  c.layer_types.clear();
  if (x.contains("layer_types") && !x.at("layer_types").is_null()) {
    TITAN_CHECK(x.at("layer_types").is_array(), "{}: 'layer_types' must be a list of strings", kWhere);
    for (const nlohmann::json& t : x.at("layer_types")) {
      TITAN_CHECK(t.is_string() && (t == "full_attention" || t == "chunked_attention"),
                  "{}: layer_types entry {} is not a Llama 4 layer type (full_attention, chunked_attention)", kWhere,
                  t.dump());
      c.layer_types.push_back(t.get<std::string>());
    }
  } else {
    for (int64_t l = 0; l < L; ++l)
      c.layer_types.push_back(c.no_rope_layers[static_cast<size_t>(l)] && chunked ? "chunked_attention"
                                                                                 : "full_attention");
  }
  c.attn_temperature_tuning = bool_field(x, "attn_temperature_tuning", true);
  c.floor_scale = num_field(x, "floor_scale", 8192);
  c.attn_scale = num_field(x, "attn_scale", 0.1);
}

void write_llama4_fields(const TransformerConfig& c, HFConfig& h) {
  nlohmann::json& x = h.extra;
  h.intermediate_size = c.moe_intermediate_size;
  x["intermediate_size_mlp"] = c.intermediate_size;
  x["num_local_experts"] = c.num_experts;
  x["num_experts_per_tok"] = c.num_experts_per_tok;
  std::vector<int64_t> moe;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    if (c.is_moe_layer(l)) moe.push_back(l);
  x["moe_layers"] = moe;
  x["interleave_moe_layer_step"] = c.decoder_sparse_step;
  x["hidden_act"] = "silu";
  x["use_qk_norm"] = c.use_qk_norm;
  std::vector<int64_t> rope = c.no_rope_layers;
  if (rope.empty()) rope.assign(static_cast<size_t>(c.num_hidden_layers), 1);  // [] would mean the interval default
  x["no_rope_layers"] = rope;
  if (c.attention_chunk_size > 0) x["attention_chunk_size"] = c.attention_chunk_size;
  else x["attention_chunk_size"] = nullptr;
  std::vector<std::string> types = c.layer_types;
  if (types.empty()) types.assign(static_cast<size_t>(c.num_hidden_layers), "full_attention");
  x["layer_types"] = types;
  x["attn_temperature_tuning"] = c.attn_temperature_tuning;
  // Llama4TextConfig.floor_scale is an int (a strict field): integral values as integers.
  if (c.floor_scale == std::floor(c.floor_scale)) x["floor_scale"] = static_cast<int64_t>(c.floor_scale);
  else x["floor_scale"] = c.floor_scale;
  x["attn_scale"] = c.attn_scale;
}

// Splits "model.layers.{l}.{rest}" into prefix "model.layers.{l}." and rest.
bool layer_key(const std::string& k, std::string& prefix, std::string& rest) {
  const std::string p = "model.layers.";
  if (k.rfind(p, 0) != 0) return false;
  const size_t dot = k.find('.', p.size());
  if (dot == std::string::npos) return false;
  prefix = k.substr(0, dot + 1);
  rest = k.substr(dot + 1);
  return true;
}

// (the shared adapter's HF suffix, the Llama 4 checkpoint's) inside a layer.
const std::vector<std::pair<std::string, std::string>>& ffn_names() {
  static const std::vector<std::pair<std::string, std::string>> m = {
      {"mlp.gate.weight", "feed_forward.router.weight"},
      {"mlp.shared_experts.", "feed_forward.shared_expert."},
      {"mlp.", "feed_forward."},
  };
  return m;
}

// Llama 4 checkpoint tensors -> the shared adapter's names: feed_forward.* renamed,
// the fused experts transposed to (E, 2F, D) and (E, D, F).
std::map<std::string, Tensor> llama4_tensors_in(const std::map<std::string, Tensor>& in, const TransformerConfig&) {
  std::map<std::string, Tensor> out;
  for (const auto& [k, t] : in) {
    std::string prefix, rest;
    if (!layer_key(k, prefix, rest)) {
      out[k] = t;
      continue;
    }
    if (rest == "feed_forward.experts.gate_up_proj" || rest == "feed_forward.experts.down_proj") {
      TITAN_CHECK(t.dim() == 3, "Llama 4 checkpoint: tensor '{}' has shape {}, expected 3 dims (E, ., .)", k,
                  shape_str(t.shape()));
      out[prefix + "mlp.experts." + rest.substr(std::string("feed_forward.experts.").size())] =
          t.transpose(1, 2).contiguous();
      continue;
    }
    std::string name = k;
    for (const auto& [a, b] : ffn_names())
      if (rest.rfind(b, 0) == 0) {
        name = prefix + a + rest.substr(b.size());
        break;
      }
    out[name] = t;
  }
  return out;
}

// The shared adapter's names -> the Llama 4 checkpoint's: per-expert tensors fused into
// experts.gate_up_proj (E, D, 2F) and experts.down_proj (E, F, D). The sigmoid router's
// expert bias has no Llama 4 counterpart: dropped when zero, refused otherwise.
std::map<std::string, Tensor> llama4_tensors_out(const std::map<std::string, Tensor>& in, const TransformerConfig&) {
  std::map<std::string, Tensor> out;
  std::map<std::string, std::vector<Tensor>> gate, up, down;  // layer prefix -> per expert
  for (const auto& [k, t] : in) {
    std::string prefix, rest;
    if (!layer_key(k, prefix, rest)) {
      out[k] = t;
      continue;
    }
    if (rest == "mlp.gate.e_score_correction_bias") {
      for (float v : t.contiguous().to_vector<float>())
        TITAN_CHECK(v == 0.0f, "Llama 4 export: '{}' is non-zero (aux-loss-free balancing moved it) and Llama 4 "
                    "checkpoints have no expert bias", k);
      continue;
    }
    const std::string ex = "mlp.experts.";
    if (rest.rfind(ex, 0) == 0) {
      const std::string r = rest.substr(ex.size());  // "{e}.gate_proj.weight"
      const size_t dot = r.find('.');
      const size_t e = static_cast<size_t>(std::stoll(r.substr(0, dot)));
      const std::string proj = r.substr(dot + 1);
      auto& dst = proj == "gate_proj.weight" ? gate[prefix] : proj == "up_proj.weight" ? up[prefix] : down[prefix];
      if (dst.size() <= e) dst.resize(e + 1);
      dst[e] = t.transpose(0, 1);  // (D, F) of gate/up, (F, D) of down
      continue;
    }
    std::string name = k;
    for (const auto& [a, b] : ffn_names())
      if (rest.rfind(a, 0) == 0) {
        name = prefix + b + rest.substr(a.size());
        break;
      }
    out[name] = t;
  }
  for (auto& [prefix, g] : gate) {
    std::vector<Tensor> gu;
    for (size_t e = 0; e < g.size(); ++e) gu.push_back(cat({g[e], up[prefix][e]}, 1));
    out[prefix + "feed_forward.experts.gate_up_proj"] = stack(gu, 0).contiguous();
    out[prefix + "feed_forward.experts.down_proj"] = stack(down[prefix], 0).contiguous();
  }
  return out;
}

}  // namespace

Family make_llama4_family() {
  Family f;
  f.name = "llama4";
  f.hf_architecture = "Llama4ForCausalLM";
  f.hf_model_type = "llama4_text";
  f.init_style = nn::InitStyle::gpt2;  // normal(0.02) (HF initializer_range)
  f.read_hf = read_llama4_fields;
  f.write_hf = write_llama4_fields;
  f.hf_tensors_in = llama4_tensors_in;
  f.hf_tensors_out = llama4_tensors_out;
  TransformerConfig base;
  base.family = "llama4";
  base.rms_norm_eps = 1e-5;
  base.rope_theta = 500000;
  base.rope_interleave_gqa = true;
  base.use_qk_norm = true;
  base.attn_temperature_tuning = true;
  base.floor_scale = 8192;
  base.attn_scale = 0.1;
  base.scoring_func = "sigmoid";
  base.num_experts_per_tok = 1;
  base.n_shared_experts = 1;
  base.score_before_experts = true;
  // L layers, NoPE every 4th (global), chunked attention on the others; MoE every
  // `moe_step`-th layer.
  auto sized = [&](int64_t V, int64_t D, int64_t F_mlp, int64_t F_expert, int64_t L, int64_t H, int64_t Hkv,
                   int64_t Dh, int64_t E, int64_t moe_step, int64_t chunk, int64_t ctx) {
    TransformerConfig c = base;
    c.vocab_size = V;
    c.hidden_size = D;
    c.intermediate_size = F_mlp;
    c.moe_intermediate_size = F_expert;
    c.num_hidden_layers = L;
    c.num_attention_heads = H;
    c.num_key_value_heads = Hkv;
    c.head_dim = Dh;
    c.num_experts = E;
    c.decoder_sparse_step = moe_step;
    c.attention_chunk_size = chunk;
    c.max_position_embeddings = ctx;
    for (int64_t l = 0; l < L; ++l) {
      const bool rope = (l + 1) % 4 != 0;
      c.no_rope_layers.push_back(rope ? 1 : 0);
      c.layer_types.push_back(rope ? "chunked_attention" : "full_attention");
    }
    return c;
  };
  // Small CPU debug model: 4 layers (3 chunked RoPE, 1 NoPE), MoE on layers 1 and 3.
  f.flavors["debugmodel"] = sized(2048, 256, 768, 256, 4, 8, 4, 32, 8, 2, 64, 4096);
  // meta-llama/Llama-4-Scout-17B-16E text_config: 16 experts on every layer, QK-norm,
  // llama3 RoPE scaling (factor 16, low = high = 1, original 8192), 10M context.
  TransformerConfig scout = sized(202048, 5120, 16384, 8192, 48, 40, 8, 128, 16, 1, 8192, 10485760);
  scout.rope_scaling.factor = 16;
  scout.rope_scaling.low_freq_factor = 1;
  scout.rope_scaling.high_freq_factor = 1;
  scout.rope_scaling.original_max_position_embeddings = 8192;
  scout.rope_scaling.rope_type = "llama3";
  f.flavors["scout"] = scout;
  // meta-llama/Llama-4-Maverick-17B-128E text_config: 128 experts on every other layer
  // (interleave_moe_layer_step 2), no QK-norm, no RoPE scaling, 1M context.
  TransformerConfig maverick = sized(202048, 5120, 16384, 8192, 48, 40, 8, 128, 128, 2, 8192, 1048576);
  maverick.use_qk_norm = false;
  f.flavors["maverick"] = maverick;
  return f;
}

}  // namespace titan::models
