// Llama 3 family: flavors from the published HF config.json values.
#include "titan/models/family.h"

namespace titan::models {

Family make_llama3_family() {
  Family f;
  f.name = "llama3";
  f.hf_architecture = "LlamaForCausalLM";
  f.hf_model_type = "llama";
  TransformerConfig base;
  base.family = "llama3";

  // TorchTitan's llama3 debugmodel (survey §6.1), with a 2048-token context.
  TransformerConfig debug = base;
  debug.vocab_size = 2048;
  debug.hidden_size = 256;
  debug.intermediate_size = 768;
  debug.num_hidden_layers = 6;
  debug.num_attention_heads = 16;
  debug.num_key_value_heads = 16;
  debug.head_dim = 16;
  debug.rope_theta = 500000;
  debug.max_position_embeddings = 2048;
  f.flavors["debugmodel"] = debug;

  // nanoGPT's shakespeare_char CPU configuration: 4 layers, 4 heads, dim 128,
  // context 64, byte vocabulary (256 + 3 specials, padded to 264).
  TransformerConfig nano = base;
  nano.vocab_size = 264;
  nano.hidden_size = 128;
  nano.intermediate_size = 344;  // SwiGLU with ~ (8/3)·D hidden, as nanoGPT's 4·D MLP params
  nano.num_hidden_layers = 4;
  nano.num_attention_heads = 4;
  nano.num_key_value_heads = 4;
  nano.head_dim = 32;
  nano.max_position_embeddings = 256;
  nano.rope_theta = 10000;
  f.flavors["nanogpt_cpu"] = nano;

  // perf-anchors "small": dim 512, 8 layers, 8/4 heads, vocab 32000, tied.
  TransformerConfig small = base;
  small.vocab_size = 32000;
  small.hidden_size = 512;
  small.intermediate_size = 1536;
  small.num_hidden_layers = 8;
  small.num_attention_heads = 8;
  small.num_key_value_heads = 4;
  small.head_dim = 64;
  small.tie_word_embeddings = true;
  small.max_position_embeddings = 2048;
  f.flavors["small"] = small;

  // perf-anchors "100m": dim 768, 12 layers, 12/4 heads, vocab 32000, tied.
  TransformerConfig m100 = small;
  m100.hidden_size = 768;
  m100.intermediate_size = 2048;
  m100.num_hidden_layers = 12;
  m100.num_attention_heads = 12;
  m100.num_key_value_heads = 4;
  f.flavors["100m"] = m100;

  // meta-llama/Llama-3.2-1B config.json.
  TransformerConfig l1b = base;
  l1b.vocab_size = 128256;
  l1b.hidden_size = 2048;
  l1b.intermediate_size = 8192;
  l1b.num_hidden_layers = 16;
  l1b.num_attention_heads = 32;
  l1b.num_key_value_heads = 8;
  l1b.head_dim = 64;
  l1b.max_position_embeddings = 131072;
  l1b.rms_norm_eps = 1e-5;
  l1b.rope_theta = 500000;
  l1b.rope_scaling = {32.0, 1.0, 4.0, 8192};
  l1b.tie_word_embeddings = true;
  l1b.bos_token_id = 128000;
  l1b.eos_token_id = 128001;
  f.flavors["llama3_1b"] = l1b;
  return f;
}

}  // namespace titan::models
