// DeepSeek-V3.2 family (HF DeepseekV32ForCausalLM, model_type deepseek_v32): DeepSeek-V3
// (MLA, a dense SwiGLU in the first first_k_dense_replace layers, DeepSeek-MoE after) with
// DeepSeek sparse attention in every layer (models/mixers/dsa.h). The MLA and MoE fields
// are DeepSeek-V3's (read_deepseek_v3_fields); the indexer's are read and written here
// under their HF names: index_topk, index_n_heads, index_head_dim. The flavors hold the
// published config.json values.
#include "titan/core/error.h"
#include "titan/models/family.h"

namespace titan::models {

namespace {

void read_deepseek_v32_fields(const HFConfig& hf, TransformerConfig& c) {
  const nlohmann::json& x = hf.extra;
  const std::string where = "config.json (" + hf.architecture() + ", model_type " + hf.model_type + ")";
  // Defaults: transformers' DeepseekV32Config.
  auto i64 = [&](const char* k, int64_t def) -> int64_t {
    if (!x.contains(k) || x.at(k).is_null()) return def;
    TITAN_CHECK(x.at(k).is_number_integer(), "{}: field '{}' must be an integer, got {}", where, k, x.at(k).dump());
    return x.at(k).get<int64_t>();
  };
  c.index_topk = i64("index_topk", 2048);
  c.index_n_heads = i64("index_n_heads", 64);
  c.index_head_dim = i64("index_head_dim", 128);
  // Not HF fields: the weight and stage of the indexer's KL loss (TransformerConfig).
  if (x.contains("indexer_loss_coeff")) {
    TITAN_CHECK(x.at("indexer_loss_coeff").is_number(), "{}: field 'indexer_loss_coeff' must be a number, got {}",
                where, x.at("indexer_loss_coeff").dump());
    c.indexer_loss_coeff = x.at("indexer_loss_coeff").get<double>();
  }
  if (x.contains("indexer_loss_stage")) {
    TITAN_CHECK(x.at("indexer_loss_stage").is_string(),
                "{}: field 'indexer_loss_stage' must be \"dense\" or \"sparse\", got {}", where,
                x.at("indexer_loss_stage").dump());
    c.indexer_loss_stage = x.at("indexer_loss_stage").get<std::string>();
  }
  TITAN_CHECK(x.contains("q_lora_rank") && !x.at("q_lora_rank").is_null(),
              "{}: field 'q_lora_rank' must be an integer (DeepSeek-V3.2's indexer reads the q latent), got {}", where,
              x.contains("q_lora_rank") ? x.at("q_lora_rank").dump() : "nothing");
  // mlp_layer_types / layer_types, when written, must be what the other fields give.
  const int64_t L = hf.num_hidden_layers, dense = i64("first_k_dense_replace", 3);
  if (x.contains("mlp_layer_types") && !x.at("mlp_layer_types").is_null()) {
    const nlohmann::json& m = x.at("mlp_layer_types");
    TITAN_CHECK(m.is_array() && static_cast<int64_t>(m.size()) == L,
                "{}: field 'mlp_layer_types' must list {} layers, got {}", where, L, m.dump());
    for (int64_t l = 0; l < L; ++l)
      TITAN_CHECK(m[static_cast<size_t>(l)] == (l < dense ? "dense" : "sparse"),
                  "{}: field 'mlp_layer_types'[{}] = {} is not supported (titan takes the first "
                  "first_k_dense_replace = {} layers dense, the rest sparse)", where, l,
                  m[static_cast<size_t>(l)].dump(), dense);
  }
  if (x.contains("layer_types") && !x.at("layer_types").is_null()) {
    const nlohmann::json& m = x.at("layer_types");
    TITAN_CHECK(m.is_array() && static_cast<int64_t>(m.size()) == L, "{}: field 'layer_types' must list {} layers, got {}",
                where, L, m.dump());
    for (int64_t l = 0; l < L; ++l)
      TITAN_CHECK(m[static_cast<size_t>(l)] == "indexed_attention",
                  "{}: field 'layer_types'[{}] = {} is not supported (every DeepSeek-V3.2 layer is "
                  "indexed_attention)", where, l, m[static_cast<size_t>(l)].dump());
  }
  TITAN_CHECK(!x.contains("rope_interleave") || x.at("rope_interleave") == true,
              "{}: field 'rope_interleave' = {} is not supported (DeepSeek-V3.2's MLA RoPE is interleaved)", where,
              x.contains("rope_interleave") ? x.at("rope_interleave").dump() : "");
}

void write_deepseek_v32_fields(const TransformerConfig& c, HFConfig& h) {
  nlohmann::json& x = h.extra;
  x.erase("rope_interleave");  // not a DeepseekV32Config field: always interleaved
  x["index_topk"] = c.index_topk;
  x["index_n_heads"] = c.index_n_heads;
  x["index_head_dim"] = c.index_head_dim;
  if (c.indexer_loss_coeff != 0.0) x["indexer_loss_coeff"] = c.indexer_loss_coeff;
  if (c.indexer_loss_stage != "dense") x["indexer_loss_stage"] = c.indexer_loss_stage;
}

}  // namespace

Family make_deepseek_v32_family() {
  Family f;
  f.name = "deepseek_v32";
  f.hf_architecture = "DeepseekV32ForCausalLM";
  f.hf_model_type = "deepseek_v32";
  f.init_style = nn::InitStyle::gpt2;  // normal(0.02) (HF initializer_range)
  f.read_hf = read_deepseek_v32_fields;
  f.write_hf = write_deepseek_v32_fields;
  TransformerConfig base;
  base.family = "deepseek_v32";
  base.scoring_func = "sigmoid";
  base.norm_topk_prob = true;
  base.rms_norm_eps = 1e-6;
  base.rope_interleave = true;

  // MLA + DSA + DeepSeek-MoE at debug size: deepseek_v3's debugmodel dims, an indexer of
  // 4 heads of 32 dims keeping 64 keys per query, 8 routed experts in 2 groups, 2 per
  // token, 1 shared, one dense layer first.
  TransformerConfig debug = base;
  debug.vocab_size = 2048;
  debug.hidden_size = 256;
  debug.intermediate_size = 768;
  debug.num_hidden_layers = 4;
  debug.num_attention_heads = 4;
  debug.num_key_value_heads = 4;
  debug.q_lora_rank = 64;
  debug.kv_lora_rank = 64;
  debug.qk_nope_head_dim = 32;
  debug.qk_rope_head_dim = 16;
  debug.head_dim = 16;
  debug.v_head_dim = 32;
  debug.max_position_embeddings = 4096;
  debug.moe_intermediate_size = 256;
  debug.first_k_dense_replace = 1;
  debug.num_experts = 8;
  debug.num_experts_per_tok = 2;
  debug.n_shared_experts = 1;
  debug.n_group = 2;
  debug.topk_group = 1;
  debug.routed_scaling_factor = 2.5;
  debug.index_topk = 64;
  debug.index_n_heads = 4;
  debug.index_head_dim = 32;
  f.flavors["debugmodel"] = debug;

  // deepseek-ai/DeepSeek-V3.2-Exp config.json (DeepSeek-V3's 671B plus the indexers; for
  // sizing).
  TransformerConfig big = base;
  big.vocab_size = 129280;
  big.hidden_size = 7168;
  big.intermediate_size = 18432;
  big.moe_intermediate_size = 2048;
  big.num_hidden_layers = 61;
  big.num_attention_heads = 128;
  big.num_key_value_heads = 128;
  big.q_lora_rank = 1536;
  big.kv_lora_rank = 512;
  big.qk_rope_head_dim = 64;
  big.head_dim = 64;
  big.qk_nope_head_dim = 128;
  big.v_head_dim = 128;
  big.num_experts = 256;
  big.num_experts_per_tok = 8;
  big.n_shared_experts = 1;
  big.n_group = 8;
  big.topk_group = 4;
  big.first_k_dense_replace = 3;
  big.routed_scaling_factor = 2.5;
  big.max_position_embeddings = 163840;
  big.rope_theta = 10000;
  big.rope_scaling.rope_type = "yarn";
  big.rope_scaling.factor = 40;
  big.rope_scaling.original_max_position_embeddings = 4096;
  big.rope_scaling.beta_fast = 32;
  big.rope_scaling.beta_slow = 1;
  big.rope_scaling.mscale = 1.0;
  big.rope_scaling.mscale_all_dim = 1.0;
  big.index_topk = 2048;
  big.index_n_heads = 64;
  big.index_head_dim = 128;
  big.bos_token_id = 0;
  big.eos_token_id = 1;
  f.flavors["671B"] = big;
  return f;
}

}  // namespace titan::models
