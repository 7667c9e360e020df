// The shared decoder's configuration. Field names follow Hugging Face config.json
// (LlamaConfig / Qwen3Config) so families map 1:1; families differ only by flags.
#pragma once
#include <cstdint>
#include <string>

namespace titan::models {

// Llama-3 RoPE frequency scaling (HF rope_type "llama3"); factor 0 = off.
struct RopeScaling {
  double factor = 0.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct TransformerConfig {
  std::string family = "llama3";      // "llama3" | "qwen3"
  int64_t vocab_size = 32000;
  int64_t hidden_size = 512;          // D
  int64_t intermediate_size = 1536;   // F (SwiGLU hidden)
  int64_t num_hidden_layers = 8;      // L
  int64_t num_attention_heads = 8;    // H
  int64_t num_key_value_heads = 8;    // Hkv
  int64_t head_dim = 64;              // Dh (independent of D / H for qwen3)
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qk_norm = false;               // qwen3: RMSNorm over Dh on q and k before RoPE
  bool attention_bias = false;
  int64_t sliding_window = 0;         // 0 = full causal attention
  int64_t bos_token_id = -1, eos_token_id = -1;

  // Throws titan::Error naming the field when sizes are inconsistent.
  void validate() const;
  // Parameter count (embeddings included once when tied).
  int64_t num_params() const;
  // Training FLOPs per token, TorchTitan convention (survey §4):
  // 6 * matmul params + 6 * L * H * 2 * Dh * seq_len (no causal halving).
  double train_flops_per_token(int64_t seq_len) const;
};

}  // namespace titan::models
