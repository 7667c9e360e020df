// DeepSeek-V3 and Kimi K2 families (HF DeepseekV3ForCausalLM; model_type deepseek_v3 /
// kimi_k2): Multi-head Latent Attention in every layer (models/mixers/mla.h), a dense
// SwiGLU in the first first_k_dense_replace layers and DeepSeek-MoE (sigmoid router with
// group-limited top-k, shared experts) after. The config.json fields are read and written
// here under their HF names; the flavors hold the published config.json values.
#include "titan/core/error.h"
#include "titan/models/family.h"

namespace titan::models {

namespace {

// Fields of DeepseekV3Config that every DeepseekV3ForCausalLM config.json carries.
constexpr const char* kRequired[] = {"kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"};

TransformerConfig deepseek_base(const std::string& family) {
  TransformerConfig c;
  c.family = family;
  c.scoring_func = "sigmoid";
  c.norm_topk_prob = true;
  c.rms_norm_eps = 1e-6;
  c.rope_interleave = true;
  return c;
}

// Small MLA dims shared by the debug flavors: H 4, nope 32 + rope 16, v 32, latent 64,
// q low-rank 64.
void debug_dims(TransformerConfig& d) {
  d.vocab_size = 2048;
  d.hidden_size = 256;
  d.intermediate_size = 768;
  d.num_hidden_layers = 4;
  d.num_attention_heads = 4;
  d.num_key_value_heads = 4;
  d.q_lora_rank = 64;
  d.kv_lora_rank = 64;
  d.qk_nope_head_dim = 32;
  d.qk_rope_head_dim = 16;
  d.head_dim = 16;
  d.v_head_dim = 32;
  d.max_position_embeddings = 4096;
  d.moe_intermediate_size = 256;
  d.first_k_dense_replace = 1;
}

// The 671B/1T published shapes shared by DeepSeek-V3 and Kimi K2.
void big_dims(TransformerConfig& c) {
  c.hidden_size = 7168;
  c.intermediate_size = 18432;
  c.moe_intermediate_size = 2048;
  c.num_hidden_layers = 61;
  c.q_lora_rank = 1536;
  c.kv_lora_rank = 512;
  c.qk_rope_head_dim = 64;
  c.head_dim = 64;
  c.qk_nope_head_dim = 128;
  c.v_head_dim = 128;
  c.num_experts_per_tok = 8;
  c.n_shared_experts = 1;
  c.rope_scaling.rope_type = "yarn";
  c.rope_scaling.original_max_position_embeddings = 4096;
  c.rope_scaling.beta_fast = 32;
  c.rope_scaling.beta_slow = 1;
  c.rope_scaling.mscale = 1.0;
  c.rope_scaling.mscale_all_dim = 1.0;
}

}  // namespace

void read_deepseek_v3_fields(const HFConfig& hf, TransformerConfig& c) {
  const nlohmann::json& x = hf.extra;
  const std::string where = "config.json (" + hf.architecture() + ", model_type " + hf.model_type + ")";
  for (const char* k : kRequired)
    TITAN_CHECK(x.contains(k) && !x.at(k).is_null(), "{}: missing required field '{}'", where, k);
  TITAN_CHECK(x.contains("q_lora_rank"), "{}: missing required field 'q_lora_rank' (null for a plain q_proj)", where);
  auto i64 = [&](const char* k, int64_t def) -> int64_t {
    if (!x.contains(k) || x.at(k).is_null()) return def;
    TITAN_CHECK(x.at(k).is_number_integer(), "{}: field '{}' must be an integer, got {}", where, k, x.at(k).dump());
    return x.at(k).get<int64_t>();
  };
  auto f64 = [&](const char* k, double def) -> double {
    if (!x.contains(k) || x.at(k).is_null()) return def;
    TITAN_CHECK(x.at(k).is_number(), "{}: field '{}' must be a number, got {}", where, k, x.at(k).dump());
    return x.at(k).get<double>();
  };
  auto boolean = [&](const char* k, bool def) -> bool {
    if (!x.contains(k) || x.at(k).is_null()) return def;
    TITAN_CHECK(x.at(k).is_boolean(), "{}: field '{}' must be true or false, got {}", where, k, x.at(k).dump());
    return x.at(k).get<bool>();
  };
  c.family = hf.is_deepseek_v32() ? "deepseek_v32" : hf.model_type == "kimi_k2" ? "kimi_k2" : "deepseek_v3";
  c.qk_norm = false;
  c.kv_lora_rank = i64("kv_lora_rank", 0);
  c.q_lora_rank = i64("q_lora_rank", 0);
  c.qk_rope_head_dim = i64("qk_rope_head_dim", 0);
  c.qk_nope_head_dim = i64("qk_nope_head_dim", 0);
  c.v_head_dim = i64("v_head_dim", 0);
  c.head_dim = c.qk_rope_head_dim;  // HF DeepseekV3Config.head_dim
  c.partial_rotary_factor = 1.0;
  c.rope_interleave = boolean("rope_interleave", true);
  // DeepSeek-MoE (defaults: transformers' DeepseekV3Config).
  c.num_experts = i64("n_routed_experts", 256);
  c.num_experts_per_tok = i64("num_experts_per_tok", 8);
  c.moe_intermediate_size = i64("moe_intermediate_size", 2048);
  c.n_shared_experts = i64("n_shared_experts", 1);
  c.first_k_dense_replace = i64("first_k_dense_replace", 3);
  c.n_group = i64("n_group", 8);
  c.topk_group = i64("topk_group", 4);
  c.routed_scaling_factor = f64("routed_scaling_factor", 2.5);
  c.norm_topk_prob = boolean("norm_topk_prob", true);
  c.scoring_func = "sigmoid";
  TITAN_CHECK(c.kv_lora_rank > 0, "{}: field 'kv_lora_rank' must be positive, got {}", where, c.kv_lora_rank);
}

void write_deepseek_v3_fields(const TransformerConfig& c, HFConfig& h) {
  nlohmann::json& x = h.extra;
  x["kv_lora_rank"] = c.kv_lora_rank;
  x["q_lora_rank"] = c.q_lora_rank > 0 ? nlohmann::json(c.q_lora_rank) : nlohmann::json(nullptr);
  x["qk_rope_head_dim"] = c.qk_rope_head_dim;
  x["qk_nope_head_dim"] = c.qk_nope_head_dim;
  x["v_head_dim"] = c.v_head_dim;
  x["rope_interleave"] = c.rope_interleave;
  x["n_routed_experts"] = c.num_experts;
  x["num_experts_per_tok"] = c.num_experts_per_tok;
  x["moe_intermediate_size"] = c.moe_intermediate_size;
  x["n_shared_experts"] = c.n_shared_experts;
  x["first_k_dense_replace"] = c.first_k_dense_replace;
  x["n_group"] = c.n_group;
  x["topk_group"] = c.topk_group;
  x["routed_scaling_factor"] = c.routed_scaling_factor;
  x["norm_topk_prob"] = c.norm_topk_prob;
}

Family make_deepseek_v3_family() {
  Family f;
  f.name = "deepseek_v3";
  f.hf_architecture = "DeepseekV3ForCausalLM";
  f.hf_model_type = "deepseek_v3";
  f.init_style = nn::InitStyle::gpt2;  // normal(0.02) (HF initializer_range)
  const TransformerConfig base = deepseek_base("deepseek_v3");

  // MLA + DeepSeek-MoE, one dense layer first (8 routed experts in 2 groups, 2 per token,
  // 1 shared). Runs once the MoE feed-forward is in the build.
  TransformerConfig debug = base;
  debug_dims(debug);
  debug.num_experts = 8;
  debug.num_experts_per_tok = 2;
  debug.n_shared_experts = 1;
  debug.n_group = 2;
  debug.topk_group = 1;
  debug.routed_scaling_factor = 2.5;
  f.flavors["debugmodel"] = debug;
  // The same MLA layers with every feed-forward dense.
  TransformerConfig dense = debug;
  dense.first_k_dense_replace = dense.num_hidden_layers;
  f.flavors["debugmodel_dense"] = dense;

  // deepseek-ai/DeepSeek-V3 config.json (671B total, 37B activated; for sizing).
  TransformerConfig big = base;
  big_dims(big);
  big.vocab_size = 129280;
  big.num_attention_heads = 128;
  big.num_key_value_heads = 128;
  big.num_experts = 256;
  big.n_group = 8;
  big.topk_group = 4;
  big.first_k_dense_replace = 3;
  big.routed_scaling_factor = 2.5;
  big.max_position_embeddings = 163840;
  big.rope_theta = 10000;
  big.rope_scaling.factor = 40;
  big.bos_token_id = 0;
  big.eos_token_id = 1;
  f.flavors["671B"] = big;
  return f;
}

Family make_kimi_k2_family() {
  Family f;
  f.name = "kimi_k2";
  f.hf_architecture = "DeepseekV3ForCausalLM";
  f.hf_model_type = "kimi_k2";
  f.init_style = nn::InitStyle::gpt2;
  const TransformerConfig base = deepseek_base("kimi_k2");

  // Kimi K2's layout at debug size: many small experts in one group, 1 shared.
  TransformerConfig debug = base;
  debug_dims(debug);
  debug.num_experts = 16;
  debug.num_experts_per_tok = 4;
  debug.n_shared_experts = 1;
  debug.n_group = 1;
  debug.topk_group = 1;
  debug.routed_scaling_factor = 2.827;
  debug.moe_intermediate_size = 128;
  f.flavors["debugmodel"] = debug;

  // moonshotai/Kimi-K2-Instruct config.json (1.04T total, 32B activated; for sizing).
  TransformerConfig big = base;
  big_dims(big);
  big.vocab_size = 163840;
  big.num_attention_heads = 64;
  big.num_key_value_heads = 64;
  big.num_experts = 384;
  big.n_group = 1;
  big.topk_group = 1;
  big.first_k_dense_replace = 1;
  big.routed_scaling_factor = 2.827;
  big.max_position_embeddings = 131072;
  big.rope_theta = 50000;
  big.rope_scaling.factor = 32;
  big.rope_scaling.beta_fast = 1;  // Kimi K2's config.json
  big.rope_scaling.beta_slow = 1;
  big.bos_token_id = 163584;
  big.eos_token_id = 163585;
  f.flavors["1T"] = big;
  return f;
}

}  // namespace titan::models
