// Qwen3-Next family (HF Qwen3NextForCausalLM): Gated DeltaNet linear_attention layers
// interleaved with gated full-attention layers (sigmoid output gate, QK-RMSNorm,
// partial rotary 0.25), every RMSNorm gain-centred ((1 + w), w stored, init 0) except
// the GDN's gated output norm. Flavors from the published config.json values.
#include "titan/models/family.h"

namespace titan::models {

Family make_qwen3_next_family() {
  Family f;
  f.name = "qwen3_next";
  f.hf_architecture = "Qwen3NextForCausalLM";
  f.hf_model_type = "qwen3_next";
  f.init_style = nn::InitStyle::gpt2;  // normal(0.02) (HF initializer_range)
  TransformerConfig base;
  base.family = "qwen3_next";
  base.qk_norm = true;
  base.attn_output_gate = true;
  base.norm_unit_offset = true;
  base.partial_rotary_factor = 0.25;
  base.rms_norm_eps = 1e-6;
  base.rope_theta = 10000000;
  base.linear_conv_kernel_dim = 4;

  // Small dense debug model: 3 GDN layers then 1 full-attention layer, twice.
  TransformerConfig debug = base;
  debug.vocab_size = 2048;
  debug.hidden_size = 256;
  debug.intermediate_size = 768;
  debug.num_hidden_layers = 8;
  debug.num_attention_heads = 4;
  debug.num_key_value_heads = 2;
  debug.head_dim = 64;
  debug.max_position_embeddings = 4096;
  debug.linear_num_key_heads = 2;
  debug.linear_num_value_heads = 4;
  debug.linear_key_head_dim = 64;
  debug.linear_value_head_dim = 64;
  for (int64_t l = 0; l < debug.num_hidden_layers; ++l)
    debug.layer_types.push_back((l + 1) % 4 ? "linear_attention" : "full_attention");
  debug.tie_word_embeddings = true;
  f.flavors["debugmodel"] = debug;

  // Qwen/Qwen3-Next-80B-A3B-Instruct config.json (512 routed experts, 10 per token, one
  // shared expert of 512; sizes itself: this build has no MoE feed-forward to run it).
  TransformerConfig big = base;
  big.vocab_size = 151936;
  big.hidden_size = 2048;
  big.intermediate_size = 5120;
  big.num_hidden_layers = 48;
  big.num_attention_heads = 16;
  big.num_key_value_heads = 2;
  big.head_dim = 256;
  big.max_position_embeddings = 262144;
  big.linear_num_key_heads = 16;
  big.linear_num_value_heads = 32;
  big.linear_key_head_dim = 128;
  big.linear_value_head_dim = 128;
  for (int64_t l = 0; l < big.num_hidden_layers; ++l)
    big.layer_types.push_back((l + 1) % 4 ? "linear_attention" : "full_attention");
  big.num_experts = 512;
  big.num_experts_per_tok = 10;
  big.moe_intermediate_size = 512;
  big.n_shared_experts = 1;
  big.norm_topk_prob = true;
  big.bos_token_id = 151643;
  big.eos_token_id = 151645;
  f.flavors["qwen3_next_80b_a3b"] = big;
  return f;
}

}  // namespace titan::models
