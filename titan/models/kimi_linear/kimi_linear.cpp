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
  return f;
}

}  // namespace titan::models
