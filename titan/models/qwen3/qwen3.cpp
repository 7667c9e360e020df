// Qwen3 family: QK-RMSNorm before RoPE, head_dim independent of D, tied embeddings
// on small sizes. Flavors from the published HF config.json values.
#include "titan/models/family.h"

namespace titan::models {

Family make_qwen3_family() {
  Family f;
  f.name = "qwen3";
  f.hf_architecture = "Qwen3ForCausalLM";
  f.hf_model_type = "qwen3";
  f.init_style = nn::InitStyle::gpt2;  // normal(0.02), residual outputs 0.02/sqrt(2L)
  TransformerConfig base;
  base.family = "qwen3";
  base.qk_norm = true;
  base.rms_norm_eps = 1e-6;
  base.rope_theta = 1000000;

  // TorchTitan's qwen3 debugmodel (survey §6.1).
  TransformerConfig debug = base;
  debug.vocab_size = 2048;
  debug.hidden_size = 256;
  debug.intermediate_size = 3072;
  debug.num_hidden_layers = 8;
  debug.num_attention_heads = 16;
  debug.num_key_value_heads = 8;
  debug.head_dim = 128;
  debug.max_position_embeddings = 4096;
  debug.tie_word_embeddings = true;
  f.flavors["debugmodel"] = debug;

  // Qwen/Qwen3-0.6B config.json.
  TransformerConfig q06 = base;
  q06.vocab_size = 151936;
  q06.hidden_size = 1024;
  q06.intermediate_size = 3072;
  q06.num_hidden_layers = 28;
  q06.num_attention_heads = 16;
  q06.num_key_value_heads = 8;
  q06.head_dim = 128;
  q06.max_position_embeddings = 40960;
  q06.tie_word_embeddings = true;
  q06.bos_token_id = 151643;
  q06.eos_token_id = 151645;
  f.flavors["qwen3_0.6b"] = q06;

  // Qwen/Qwen3-1.7B config.json.
  TransformerConfig q17 = q06;
  q17.hidden_size = 2048;
  q17.intermediate_size = 6144;
  f.flavors["qwen3_1.7b"] = q17;
  return f;
}

}  // namespace titan::models
