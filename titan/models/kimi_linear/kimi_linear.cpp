// Kimi Linear family (Kimi Team 2025, "Kimi Linear"): Kimi Delta Attention layers
// (per-channel decay, models/mixers/kda.h) interleaved 3:1 with full-attention layers.
// Kimi Linear's published full attention is MLA; this family uses GQA full attention
// with RoPE in its place. Its config.json uses KimiLinearConfig's names with
// "kv_lora_rank": null for the GQA full attention (HF's field is an int, so transformers
// refuses the file rather than building MLA); a config.json with MLA
// (kv_lora_rank set, or absent: HF's default 512) is refused (checkpoint/hf_config.cpp).
#include "titan/models/family.h"

namespace titan::models {

Family make_kimi_linear_family() {
  Family f;
  f.name = "kimi_linear";
  f.hf_architecture = "KimiLinearForCausalLM";
  f.hf_model_type = "kimi_linear";
  f.init_style = nn::InitStyle::gpt2;  // normal(0.02) (HF initializer_range)
  TransformerConfig base;
  base.family = "kimi_linear";
  base.linear_attn_type = "kda";
  base.rms_norm_eps = 1e-5;
  base.rope_theta = 10000;
  base.linear_conv_kernel_dim = 4;

  // Small dense debug model: 3 KDA layers then 1 GQA layer, twice.
  TransformerConfig debug = base;
  debug.vocab_size = 2048;
  debug.hidden_size = 256;
  debug.intermediate_size = 768;
  debug.num_hidden_layers = 8;
  debug.num_attention_heads = 4;
  debug.num_key_value_heads = 2;
  debug.head_dim = 64;
  debug.max_position_embeddings = 4096;
  debug.linear_num_key_heads = debug.linear_num_value_heads = 4;
  debug.linear_key_head_dim = debug.linear_value_head_dim = 64;
  for (int64_t l = 0; l < debug.num_hidden_layers; ++l)
    debug.layer_types.push_back((l + 1) % 4 ? "linear_attention" : "full_attention");
  debug.tie_word_embeddings = true;
  f.flavors["debugmodel"] = debug;

  // Kimi-Linear-48B-A3B sized from transformers' KimiLinearConfig defaults (hidden 2304,
  // 27 layers, KDA 32 heads of 128, 256 routed experts of 1024 with 8 per token and one
  // shared expert, layer 0 dense, full attention at layers 4, 8, ..., 24), with GQA (32/32
  // heads of 128) in place of MLA. Sizes itself only: this build has no MoE feed-forward.
  TransformerConfig big = base;
  big.vocab_size = 163840;
  big.hidden_size = 2304;
  big.intermediate_size = 9216;
  big.num_hidden_layers = 27;
  big.num_attention_heads = 32;
  big.num_key_value_heads = 32;
  big.head_dim = 128;
  big.max_position_embeddings = 1048576;
  big.linear_num_key_heads = big.linear_num_value_heads = 32;
  big.linear_key_head_dim = big.linear_value_head_dim = 128;
  for (int64_t l = 0; l < big.num_hidden_layers; ++l)
    big.layer_types.push_back(l && l % 4 == 0 ? "full_attention" : "linear_attention");
  big.num_experts = 256;
  big.num_experts_per_tok = 8;
  big.moe_intermediate_size = 1024;
  big.n_shared_experts = 1;
  big.first_k_dense_replace = 1;
  big.norm_topk_prob = true;
  big.scoring_func = "sigmoid";
  big.routed_scaling_factor = 2.446;
  f.flavors["kimi_linear_48b_a3b"] = big;
  return f;
}

}  // namespace titan::models
