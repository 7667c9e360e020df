#include "titan/models/family.h"

#include <algorithm>


#include "titan/autograd/node.h"
#include "titan/models/common/decoder.h"

namespace titan::models {

Family make_llama3_family();
Family make_qwen3_family();
Family make_qwen3_next_family();
Family make_qwen3_5_family();  // models/qwen3_5
Family make_deepseek_v3_family();
Family make_kimi_k2_family();
void read_deepseek_v3_fields(const HFConfig& hf, TransformerConfig& c);   // models/deepseek_v3
void write_deepseek_v3_fields(const TransformerConfig& c, HFConfig& h);  // models/deepseek_v3
Family make_kimi_linear_family();
Family make_qwen3_moe_family();
Family make_gemma2_family();  // models/gemma2
Family make_gemma3_family();  // models/gemma3
Family make_deepseek_v32_family();  // models/deepseek_v32
Family make_llama4_family();        // models/llama4
Family make_gpt_oss_family();       // models/gpt_oss
// gpt-oss's router and expert tensors (models/gpt_oss): false for a name they do not cover.
bool load_gpt_oss_param(const std::string& name, Tensor p, const std::map<std::string, Tensor>& hf,
                        const std::string& source);
bool export_gpt_oss_params(const std::string& name, const std::map<std::string, Tensor>& params,
                           std::map<std::string, Tensor>& out);

const std::vector<Family>& families() {
  static const std::vector<Family> fams = {make_llama3_family(),      make_qwen3_family(),
                                           make_qwen3_next_family(),  make_qwen3_5_family(),
                                           make_deepseek_v3_family(),
                                           make_kimi_k2_family(),     make_kimi_linear_family(),
                                           make_qwen3_moe_family(),   make_gemma2_family(),
                                           make_gemma3_family(),      make_deepseek_v32_family(),
                                           make_llama4_family(),
                                           make_gpt_oss_family()};
  return fams;
}

const Family& family(const std::string& name) {
  std::string names;
  for (auto& f : families()) {
    if (f.name == name) return f;
    names += (names.empty() ? "" : ", ") + f.name;
  }
  fail("unknown model family '{}' (available: {})", name, names);
}

bool family_registered(const std::string& name) {
  family(name);
  return true;
}

nn::InitStyle family_init_style(const std::string& name) { return family(name).init_style; }

TransformerConfig flavor(const std::string& family_name, const std::string& flavor_name) {
  const Family& f = family(family_name);
  auto it = f.flavors.find(flavor_name);
  if (it != f.flavors.end()) return it->second;
  std::string names;
  for (auto& [n, _] : f.flavors) names += (names.empty() ? "" : ", ") + n;
  fail("unknown flavor '{}' for model family '{}' (available: {})", flavor_name, family_name, names);
}

namespace {
// Qwen3NextConfig's hybrid fields (they sit in HFConfig::extra). MoE layers are read
// with the HF names and refused by config_from_hf (the shared expert gate is not modelled).
void read_qwen3_next_fields(const HFConfig& hf, TransformerConfig& c) {
  const nlohmann::json& x = hf.extra;
  auto i64 = [&](const char* k, int64_t def) { return x.contains(k) ? x.at(k).get<int64_t>() : def; };
  c.attn_output_gate = true;
  c.norm_unit_offset = true;
  c.linear_num_key_heads = i64("linear_num_key_heads", 16);
  c.linear_num_value_heads = i64("linear_num_value_heads", 32);
  c.linear_key_head_dim = i64("linear_key_head_dim", 128);
  c.linear_value_head_dim = i64("linear_value_head_dim", 128);
  c.linear_conv_kernel_dim = i64("linear_conv_kernel_dim", 4);
  if (x.contains("layer_types")) {
    c.layer_types = x.at("layer_types").get<std::vector<std::string>>();
  } else {
    const int64_t every = i64("full_attention_interval", 4);
    TITAN_CHECK(every >= 1, "config.json: full_attention_interval must be >= 1, got {}", every);
    for (int64_t l = 0; l < hf.num_hidden_layers; ++l)
      c.layer_types.push_back((l + 1) % every ? "linear_attention" : "full_attention");
  }
  c.num_experts = i64("num_experts", 0);
  c.num_experts_per_tok = i64("num_experts_per_tok", 0);
  c.moe_intermediate_size = i64("moe_intermediate_size", 0);
  c.decoder_sparse_step = i64("decoder_sparse_step", 1);
  if (x.contains("mlp_only_layers")) c.mlp_only_layers = x.at("mlp_only_layers").get<std::vector<int64_t>>();
}
// KimiLinearConfig's linear-attention fields: linear_attn_config {head_dim, num_heads,
// short_conv_kernel_size, kda_layers, full_attn_layers (1-based)} as the published
// checkpoints write them, else layer_types / linear_head_dim / linear_num_heads /
// linear_conv_kernel_dim (HF's attribute names). Routed experts are refused by the block.
void read_kimi_linear_fields(const HFConfig& hf, TransformerConfig& c) {
  const nlohmann::json& x = hf.extra;
  const nlohmann::json la = x.contains("linear_attn_config") ? x.at("linear_attn_config") : nlohmann::json::object();
  auto i64 = [&](const char* lk, const char* k, int64_t def) {
    if (la.contains(lk)) return la.at(lk).get<int64_t>();
    return x.contains(k) ? x.at(k).get<int64_t>() : def;
  };
  c.linear_attn_type = "kda";
  c.linear_num_key_heads = c.linear_num_value_heads = i64("num_heads", "linear_num_heads", 32);
  c.linear_key_head_dim = c.linear_value_head_dim = i64("head_dim", "linear_head_dim", 128);
  c.linear_conv_kernel_dim = i64("short_conv_kernel_size", "linear_conv_kernel_dim", 4);
  if (x.contains("layer_types")) {
    c.layer_types = x.at("layer_types").get<std::vector<std::string>>();
  } else if (la.contains("full_attn_layers") && la.contains("kda_layers")) {
    c.layer_types.assign(static_cast<size_t>(hf.num_hidden_layers), "");
    for (const char* key : {"full_attn_layers", "kda_layers"})
      for (int64_t l : la.at(key).get<std::vector<int64_t>>()) {
        TITAN_CHECK(l >= 1 && l <= hf.num_hidden_layers, "config.json: linear_attn_config.{} has layer {} outside [1, {}]",
                    key, l, hf.num_hidden_layers);
        c.layer_types[static_cast<size_t>(l - 1)] = std::string(key) == "kda_layers" ? "linear_attention" : "full_attention";
      }
  } else {  // HF's default: full attention at layers 4, 8, ... (0-based, never layer 0)
    for (int64_t l = 0; l < hf.num_hidden_layers; ++l)
      c.layer_types.push_back(l && l % 4 == 0 ? "full_attention" : "linear_attention");
  }
  c.num_experts = x.contains("num_experts") ? x.at("num_experts").get<int64_t>() : 0;
}
}  // namespace

TransformerConfig config_from_hf(const HFConfig& hf) {
  TransformerConfig c;
  c.family = hf.is_qwen3() ? "qwen3" : hf.is_qwen3_next() ? "qwen3_next" : hf.is_kimi_linear() ? "kimi_linear" : "llama3";
  // A family with its own config.json reader is chosen by its architecture (DeepSeek-V3
  // and Kimi K2 share one, and read_deepseek_v3_fields picks between them below).
  for (const Family& f : families())
    if (f.read_hf && f.hf_architecture == hf.architecture()) c.family = f.name;
  c.qk_norm = hf.is_qwen3() || hf.is_qwen3_next() || hf.is_qwen3_5() || hf.is_qwen3_moe();
  c.partial_rotary_factor = hf.partial_rotary_factor;
  if (hf.is_qwen3_next() || hf.is_qwen3_5()) read_qwen3_next_fields(hf, c);
  if (hf.is_kimi_linear()) read_kimi_linear_fields(hf, c);
  c.vocab_size = hf.vocab_size;
  c.hidden_size = hf.hidden_size;
  c.intermediate_size = hf.intermediate_size;
  c.num_hidden_layers = hf.num_hidden_layers;
  c.num_attention_heads = hf.num_attention_heads;
  c.num_key_value_heads = hf.num_key_value_heads;
  c.head_dim = hf.head_dim;
  c.max_position_embeddings = hf.max_position_embeddings;
  c.rms_norm_eps = hf.rms_norm_eps;
  c.rope_theta = hf.rope_theta;
  if (hf.rope_scaling) {
    c.rope_scaling.rope_type = hf.rope_scaling->rope_type;
    c.rope_scaling.beta_fast = hf.rope_scaling->beta_fast;
    c.rope_scaling.beta_slow = hf.rope_scaling->beta_slow;
    c.rope_scaling.mscale = hf.rope_scaling->mscale;
    c.rope_scaling.mscale_all_dim = hf.rope_scaling->mscale_all_dim;
    c.rope_scaling.truncate = hf.rope_scaling->truncate;
    c.rope_scaling.factor = hf.rope_scaling->factor;
    c.rope_scaling.low_freq_factor = hf.rope_scaling->low_freq_factor;
    c.rope_scaling.high_freq_factor = hf.rope_scaling->high_freq_factor;
    c.rope_scaling.original_max_position_embeddings = hf.rope_scaling->original_max_position_embeddings;
  }
  c.tie_word_embeddings = hf.tie_word_embeddings;
  c.attention_bias = hf.attention_bias;
  if (hf.bos_token_id) c.bos_token_id = *hf.bos_token_id;
  if (!hf.eos_token_id.empty()) c.eos_token_id = hf.eos_token_id[0];
  // The family's own fields, after the shared ones (it may re-read a shared key, as
  // Llama 4 does intermediate_size).
  if (const Family& f = family(c.family); f.read_hf) f.read_hf(hf, c);
  // HF keys that change the math and that no family models: refused, never ignored.
  if (auto it = hf.extra.find("hidden_act"); it != hf.extra.end() && !it->is_null())
    TITAN_CHECK(it->is_string() && it->get<std::string>() == c.hidden_act,
                "config.json: hidden_act {} is not supported for {} (it computes {})", it->dump(),
                hf.architectures.empty() ? hf.model_type : hf.architectures[0], c.hidden_act);
  if (auto it = hf.extra.find("mlp_bias"); it != hf.extra.end() && !it->is_null())
    TITAN_CHECK(it->is_boolean() && !it->get<bool>(),
                "config.json: mlp_bias {} is not supported (the feed-forward projections have no bias)",
                it->dump());
  if (hf.is_deepseek_v3() || hf.is_deepseek_v32()) read_deepseek_v3_fields(hf, c);
  if (hf.is_qwen3_next())
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
      TITAN_CHECK(!c.is_moe_layer(l),
                  "config.json: Qwen3NextForCausalLM layer {} is a mixture-of-experts layer (num_experts = {}), "
                  "which is not supported: its shared_expert and sigmoid shared_expert_gate are not modelled "
                  "(list every layer in mlp_only_layers or set num_experts to 0)", l, c.num_experts);
  c.validate();
  return c;
}

HFConfig config_to_hf(const TransformerConfig& c) {
  const Family& f = family(c.family);
  HFConfig h;
  h.architectures = {f.hf_architecture};
  h.model_type = f.hf_model_type;
  h.hidden_size = c.hidden_size;
  h.intermediate_size = c.intermediate_size;
  h.num_hidden_layers = c.num_hidden_layers;
  h.num_attention_heads = c.num_attention_heads;
  h.num_key_value_heads = c.num_key_value_heads;
  h.head_dim = c.head_dim;
  h.vocab_size = c.vocab_size;
  h.max_position_embeddings = c.max_position_embeddings;
  h.rms_norm_eps = c.rms_norm_eps;
  h.rope_theta = c.rope_theta;
  if (c.rope_scaling.factor > 0) {
    HFRopeScaling rs;
    rs.rope_type = c.rope_scaling.rope_type;
    rs.beta_fast = c.rope_scaling.beta_fast;
    rs.beta_slow = c.rope_scaling.beta_slow;
    rs.mscale = c.rope_scaling.mscale;
    rs.mscale_all_dim = c.rope_scaling.mscale_all_dim;
    rs.truncate = c.rope_scaling.truncate;
    rs.factor = c.rope_scaling.factor;
    rs.low_freq_factor = c.rope_scaling.low_freq_factor;
    rs.high_freq_factor = c.rope_scaling.high_freq_factor;
    rs.original_max_position_embeddings = c.rope_scaling.original_max_position_embeddings;
    h.rope_scaling = rs;
  }
  h.tie_word_embeddings = c.tie_word_embeddings;
  h.attention_bias = c.attention_bias;
  if (c.bos_token_id >= 0) h.bos_token_id = c.bos_token_id;
  if (c.eos_token_id >= 0) h.eos_token_id = {c.eos_token_id};
  h.partial_rotary_factor = c.partial_rotary_factor;
  if (c.linear_attn_type == "kda") {
    // KimiLinearConfig names; GQA full attention written as "kv_lora_rank": null.
    h.extra["kv_lora_rank"] = nullptr;
    h.extra["layer_types"] = c.layer_types;
    h.extra["linear_num_heads"] = c.linear_num_value_heads;
    h.extra["linear_head_dim"] = c.linear_key_head_dim;
    h.extra["linear_conv_kernel_dim"] = c.linear_conv_kernel_dim;
    h.extra["num_experts"] = c.num_experts;
  } else if (std::find(c.layer_types.begin(), c.layer_types.end(), "linear_attention") != c.layer_types.end()) {
    h.extra["layer_types"] = c.layer_types;
    h.extra["linear_num_key_heads"] = c.linear_num_key_heads;
    h.extra["linear_num_value_heads"] = c.linear_num_value_heads;
    h.extra["linear_key_head_dim"] = c.linear_key_head_dim;
    h.extra["linear_value_head_dim"] = c.linear_value_head_dim;
    h.extra["linear_conv_kernel_dim"] = c.linear_conv_kernel_dim;
    h.extra["num_experts"] = c.num_experts;
    h.extra["mlp_only_layers"] = c.mlp_only_layers;
  }
  if (c.is_mla()) write_deepseek_v3_fields(c, h);
  if (f.write_hf) f.write_hf(c, h);
  h.torch_dtype = "float32";
  return h;
}

namespace {
// (titan suffix inside a layer, HF suffix inside a layer)
const std::vector<std::pair<std::string, std::string>>& layer_map() {
  static const std::vector<std::pair<std::string, std::string>> m = {
      {"attention.wq.weight", "self_attn.q_proj.weight"},
      {"attention.wk.weight", "self_attn.k_proj.weight"},
      {"attention.wv.weight", "self_attn.v_proj.weight"},
      {"attention.wo.weight", "self_attn.o_proj.weight"},
      {"attention.wq.bias", "self_attn.q_proj.bias"},
      {"attention.wk.bias", "self_attn.k_proj.bias"},
      {"attention.wv.bias", "self_attn.v_proj.bias"},
      {"attention.q_norm.weight", "self_attn.q_norm.weight"},
      {"attention.k_norm.weight", "self_attn.k_norm.weight"},
      {"feed_forward.w1.weight", "mlp.gate_proj.weight"},
      {"feed_forward.w2.weight", "mlp.down_proj.weight"},
      {"feed_forward.w3.weight", "mlp.up_proj.weight"},
      {"attention.in_proj_qkvz.weight", "linear_attn.in_proj_qkvz.weight"},
      {"attention.in_proj_ba.weight", "linear_attn.in_proj_ba.weight"},
      {"attention.conv1d.weight", "linear_attn.conv1d.weight"},
      {"attention.dt_bias", "linear_attn.dt_bias"},
      {"attention.A_log", "linear_attn.A_log"},
      {"attention.norm.weight", "linear_attn.norm.weight"},
      {"attention.out_proj.weight", "linear_attn.out_proj.weight"},
      {"attention.q_proj.weight", "self_attn.q_proj.weight"},
      {"attention.q_a_proj.weight", "self_attn.q_a_proj.weight"},
      {"attention.q_a_proj.bias", "self_attn.q_a_proj.bias"},
      {"attention.q_a_layernorm.weight", "self_attn.q_a_layernorm.weight"},
      {"attention.q_b_proj.weight", "self_attn.q_b_proj.weight"},
      {"attention.kv_a_proj_with_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight"},
      {"attention.kv_a_proj_with_mqa.bias", "self_attn.kv_a_proj_with_mqa.bias"},
      {"attention.kv_a_layernorm.weight", "self_attn.kv_a_layernorm.weight"},
      {"attention.kv_b_proj.weight", "self_attn.kv_b_proj.weight"},
      {"attention.o_proj.weight", "self_attn.o_proj.weight"},
      {"attention.o_proj.bias", "self_attn.o_proj.bias"},
      {"attention.wo.bias", "self_attn.o_proj.bias"},
      {"attention.indexer.wq_b.weight", "self_attn.indexer.wq_b.weight"},
      {"attention.indexer.wk.weight", "self_attn.indexer.wk.weight"},
      {"attention.indexer.k_norm.weight", "self_attn.indexer.k_norm.weight"},
      {"attention.indexer.k_norm.bias", "self_attn.indexer.k_norm.bias"},
      {"attention.indexer.weights_proj.weight", "self_attn.indexer.weights_proj.weight"},
      {"attention.forget_gate.f_a_proj.weight", "self_attn.forget_gate.f_a_proj.weight"},
      {"attention.forget_gate.f_b_proj.weight", "self_attn.forget_gate.f_b_proj.weight"},
      {"attention.forget_gate.dt_bias", "self_attn.forget_gate.dt_bias"},
      {"attention.forget_gate.A_log", "self_attn.forget_gate.A_log"},
      {"attention.b_proj.weight", "self_attn.b_proj.weight"},
      {"attention.g_a_proj.weight", "self_attn.g_a_proj.weight"},
      {"attention.g_b_proj.weight", "self_attn.g_b_proj.weight"},
      {"attention.o_norm.weight", "self_attn.o_norm.weight"},
      {"moe.router.gate.weight", "mlp.gate.weight"},
      {"moe.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight"},
      {"moe.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight"},
      {"moe.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight"},
      {"moe.expert_bias", "mlp.gate.e_score_correction_bias"},
      {"attention.sinks", "self_attn.sinks"},
      {"attention_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
  };
  return m;
}
// Blocks with post-norms (Gemma 2 / OLMo 2) name their norms differently in HF: the
// attention output's norm takes post_attention_layernorm, the pre-feed-forward norm is
// pre_feedforward_layernorm. Looked up before layer_map for a model that has them.
const std::vector<std::pair<std::string, std::string>>& post_norm_map() {
  static const std::vector<std::pair<std::string, std::string>> m = {
      {"ffn_norm.weight", "pre_feedforward_layernorm.weight"},
      {"attention_post_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_post_norm.weight", "post_feedforward_layernorm.weight"},
  };
  return m;
}
// Whether the model has a parameter whose name contains `part`.
bool has_param(const nn::Module& model, const char* part) {
  for (auto& [name, p] : model.named_parameters())
    if (name.find(part) != std::string::npos) return true;
  return false;
}
// Whether the model's blocks have post-norms (parameter layers.{l}.attention_post_norm).
bool has_post_norms(const nn::Module& model) { return has_param(model, ".attention_post_norm."); }
// Experts with biases are gpt-oss's: HF names and packs them as GptOssExperts
// (mlp.router, mlp.experts.gate_up_proj, ...; models/gpt_oss).
bool has_gpt_oss_experts(const nn::Module& model) { return has_param(model, ".moe.experts.b1"); }
const std::vector<std::pair<std::string, std::string>>& top_map() {
  static const std::vector<std::pair<std::string, std::string>> m = {
      {"tok_embeddings.weight", "model.embed_tokens.weight"},
      {"norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"},
  };
  return m;
}
bool split_layer(const std::string& name, const std::string& prefix, std::string& idx, std::string& rest) {
  if (name.rfind(prefix, 0) != 0) return false;
  size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos) return false;
  idx = name.substr(prefix.size(), dot - prefix.size());
  if (idx.empty() || idx.find_first_not_of("0123456789") != std::string::npos) return false;
  rest = name.substr(dot + 1);
  return true;
}
}  // namespace

namespace {
std::string to_hf_name(const std::string& n, bool post_norms) {
  for (auto& [a, b] : top_map())
    if (n == a) return b;
  std::string idx, rest;
  if (split_layer(n, "layers.", idx, rest)) {
    if (post_norms)
      for (auto& [a, b] : post_norm_map())
        if (rest == a) return "model.layers." + idx + "." + b;
    for (auto& [a, b] : layer_map())
      if (rest == a) return "model.layers." + idx + "." + b;
    for (auto& [a, b] : post_norm_map())
      if (rest == a) return "model.layers." + idx + "." + b;
  }
  fail("state-dict adapter: titan parameter '{}' has no Hugging Face name", n);
}
}  // namespace

std::string to_hf_name(const std::string& n) { return to_hf_name(n, false); }

std::string from_hf_name(const std::string& n) {
  for (auto& [a, b] : top_map())
    if (n == b) return a;
  std::string idx, rest;
  if (split_layer(n, "model.layers.", idx, rest)) {
    if (rest == "pre_feedforward_layernorm.weight" || rest == "post_feedforward_layernorm.weight")
      for (auto& [a, b] : post_norm_map())
        if (rest == b) return "layers." + idx + "." + a;
    for (auto& [a, b] : layer_map())
      if (rest == b) return "layers." + idx + "." + a;
  }
  fail("state-dict adapter: Hugging Face tensor '{}' has no titan counterpart", n);
}

namespace {
// layers.{l}.moe.experts.w{1,2,3} -> the HF per-expert prefix "model.layers.{l}.mlp.experts."
// and which (0: w1, 1: w2, 2: w3).
bool grouped_expert(const std::string& name, std::string& prefix, int& which) {
  std::string idx, rest;
  if (!split_layer(name, "layers.", idx, rest)) return false;
  static const char* ws[3] = {"moe.experts.w1", "moe.experts.w2", "moe.experts.w3"};
  for (int w = 0; w < 3; ++w)
    if (rest == ws[w]) {
      prefix = "model.layers." + idx + ".mlp.experts.";
      which = w;
      return true;
    }
  return false;
}
const char* const kExpertProj[3] = {"gate_proj", "down_proj", "up_proj"};  // w1, w2, w3

void copy_checked(Tensor dst, const Tensor& src, const std::string& hn, const std::string& source) {
  TITAN_CHECK(src.shape() == dst.shape(), "{}: tensor '{}' has shape {}, the model expects {}", source, hn,
              shape_str(src.shape()), shape_str(dst.shape()));
  TITAN_CHECK(is_floating(src.dtype()), "{}: tensor '{}' has dtype {}, expected a floating dtype", source, hn,
              dtype_name(src.dtype()));
  dst.copy_(src.contiguous());
}

// Stacks an expert weight (E, out, in) from per-expert HF tensors or the fused layout.
void load_grouped(Tensor p, const std::string& prefix, int which, const std::map<std::string, Tensor>& hf,
                  const std::string& source) {
  const int64_t E = p.size(0);
  const std::string first = prefix + "0." + kExpertProj[which] + ".weight";
  if (hf.count(first)) {
    for (int64_t e = 0; e < E; ++e) {
      const std::string hn = prefix + std::to_string(e) + "." + kExpertProj[which] + ".weight";
      auto it = hf.find(hn);
      TITAN_CHECK(it != hf.end(), "{}: missing tensor '{}' (expected shape {})", source, hn,
                  shape_str(p.select(0, e).shape()));
      copy_checked(p.select(0, e), it->second, hn, source);
    }
    return;
  }
  const std::string fused = prefix + (which == 1 ? "down_proj" : "gate_up_proj");
  auto it = hf.find(fused);
  TITAN_CHECK(it != hf.end(), "{}: missing tensor '{}' (or the fused '{}'; expected {} experts of shape {})",
              source, first, fused, E, shape_str(p.select(0, 0).shape()));
  if (which == 1) {
    copy_checked(p, it->second, fused, source);
    return;
  }
  const int64_t F = p.size(1);
  TITAN_CHECK(it->second.dim() == 3 && it->second.size(0) == E && it->second.size(1) == 2 * F &&
                  it->second.size(2) == p.size(2),
              "{}: tensor '{}' has shape {}, the model expects [{}, {}, {}]", source, fused,
              shape_str(it->second.shape()), E, 2 * F, p.size(2));
  copy_checked(p, it->second.narrow(1, which == 0 ? 0 : F, F), fused, source);
}
}  // namespace

namespace {
// The family of a Decoder model, or null for another module.
const Decoder* as_decoder(const nn::Module& model) { return dynamic_cast<const Decoder*>(&model); }
const Family* model_family(const nn::Module& model) {
  const Decoder* d = as_decoder(model);
  return d ? &family(d->config().family) : nullptr;
}
}  // namespace

void load_hf_state_dict(nn::Module& model, const std::map<std::string, Tensor>& hf_in,
                        const std::string& source) {
  autograd::NoGradGuard ng;
  const Family* fam = model_family(model);
  std::map<std::string, Tensor> renamed;
  if (fam && fam->hf_tensors_in) renamed = fam->hf_tensors_in(hf_in, as_decoder(model)->config());
  const std::map<std::string, Tensor>& hf = fam && fam->hf_tensors_in ? renamed : hf_in;
  const bool post = has_post_norms(model), oss = has_gpt_oss_experts(model);
  for (auto& [name, p] : model.named_parameters()) {
    if (oss && load_gpt_oss_param(name, p, hf, source)) continue;
    std::string prefix;
    int which = 0;
    if (grouped_expert(name, prefix, which)) {
      load_grouped(p, prefix, which, hf, source);
      continue;
    }
    const std::string hn = to_hf_name(name, post);
    auto it = hf.find(hn);
    if (it == hf.end() && name == "tok_embeddings.weight") {
      // Some tied checkpoints store only lm_head.
      it = hf.find("lm_head.weight");
    }
    TITAN_CHECK(it != hf.end(), "{}: missing tensor '{}' (expected shape {})", source, hn,
                shape_str(p.shape()));
    copy_checked(p, it->second, hn, source);
  }
  for (auto& [name, b] : model.named_buffers()) {
    auto it = hf.find(to_hf_name(name));
    if (it != hf.end()) copy_checked(b, it->second, it->first, source);
  }
}

std::map<std::string, Tensor> hf_state_dict(const nn::Module& model) {
  std::map<std::string, Tensor> out;
  const bool post = has_post_norms(model), oss = has_gpt_oss_experts(model);
  std::map<std::string, Tensor> params;
  if (oss)
    for (auto& [name, p] : model.named_parameters()) params[name] = p;
  for (auto& [name, p] : model.named_parameters()) {
    if (oss && export_gpt_oss_params(name, params, out)) continue;
    std::string prefix;
    int which = 0;
    if (grouped_expert(name, prefix, which)) {
      Tensor d = p.detach();
      for (int64_t e = 0; e < d.size(0); ++e)
        out[prefix + std::to_string(e) + "." + kExpertProj[which] + ".weight"] = d.select(0, e);
      continue;
    }
    const bool conv = name.size() >= 13 && name.compare(name.size() - 13, 13, "conv1d.weight") == 0;
    TITAN_CHECK(p.dim() <= 2 || conv,
                "hf_state_dict: parameter '{}' has shape {}: the model's weights were repacked for "
                "inference (Decoder::repack_for_decode) and cannot be saved",
                name, shape_str(p.shape()));
    out[to_hf_name(name, post)] = p.detach();
  }
  for (auto& [name, b] : model.named_buffers()) out[to_hf_name(name)] = b;
  const Family* fam = model_family(model);
  return fam && fam->hf_tensors_out ? fam->hf_tensors_out(out, as_decoder(model)->config()) : out;
}

}  // namespace titan::models
