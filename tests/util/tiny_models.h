// Model configs shared by tests.
#pragma once
#include "titan/config/job_config.h"

namespace titan::test {

// The small random-init chat model of the RL tests: qwen3 over byte_chat tokens, 2
// layers, dim 64, 4 query heads and 2 KV heads of 16, SwiGLU width 128, QK-norm, tied
// embeddings, RMSNorm eps 1e-6.
inline void set_tiny_chat_qwen3(config::ModelConfig& m) {
  m.name = "qwen3";
  m.tokenizer_path = "byte_chat";
  m.vocab_size = 0;
  m.dim = 64;
  m.n_layers = 2;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.head_dim = 16;
  m.ffn_hidden_dim = 128;
  m.qk_norm = true;
  m.tie_embeddings = true;
  m.norm_eps = 1e-6;
}

}  // namespace titan::test
