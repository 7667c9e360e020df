// Hugging Face config.json for the decoder families titan supports
// (LlamaForCausalLM, Qwen3ForCausalLM). Field names and defaults follow
// transformers' LlamaConfig / Qwen3Config. Newer transformers write "dtype" for
// "torch_dtype" and may put rope_theta/rope_scaling under "rope_parameters"; both
// spellings are read. Keys titan does not model are kept in `extra` and written
// back unchanged by hf_config_to_json, so export round-trips the file.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace titan {

inline constexpr const char* kSupportedArchitectures[] = {"LlamaForCausalLM", "Qwen3ForCausalLM",
                                                          "Qwen3NextForCausalLM", "DeepseekV3ForCausalLM",
                                                          "Qwen3MoeForCausalLM", "Gemma2ForCausalLM",
                                                          "Gemma3ForCausalLM", "DeepseekV32ForCausalLM",
                                                          "Llama4ForCausalLM", "GptOssForCausalLM",
                                                          "Qwen3_5ForCausalLM"};

// RoPE scaling: Llama 3.1/3.2 frequency bands (rope_type "llama3"; transformers
// modeling_rope_utils._compute_llama3_parameters) or YaRN (rope_type "yarn", as
// DeepSeek-V3 / Kimi K2 configure it; _compute_yarn_parameters).
struct HFRopeScaling {
  std::string rope_type = "llama3";
  double factor = 8.0;
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 8192;
  double beta_fast = 32.0;        // yarn (default 32)
  double beta_slow = 1.0;         // yarn (default 1)
  double mscale = 0.0;            // yarn; 0 = absent
  double mscale_all_dim = 0.0;    // yarn; 0 = absent
  bool truncate = true;           // yarn (default true; gpt-oss: false)
};

struct HFConfig {
  std::vector<std::string> architectures;  // e.g. {"LlamaForCausalLM"}
  std::string model_type;                  // "llama" | "qwen3"
  int64_t hidden_size = 0;                 // D
  int64_t intermediate_size = 0;           // F
  int64_t num_hidden_layers = 0;           // L
  int64_t num_attention_heads = 0;         // H
  int64_t num_key_value_heads = 0;         // Hkv (default H)
  int64_t head_dim = 0;                    // Dh (default D / H)
  int64_t vocab_size = 0;                  // V
  int64_t max_position_embeddings = 0;     // tokens
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::optional<HFRopeScaling> rope_scaling;  // null: plain RoPE
  double partial_rotary_factor = 1.0;       // top level or rope_parameters (Qwen3-Next: 0.25)
  bool tie_word_embeddings = false;         // lm_head shares embed_tokens
  bool attention_bias = false;              // q/k/v/o projections have biases
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_id;        // config.json allows an int or a list
  std::string torch_dtype;                  // "bfloat16", "float32", ... ("" if absent)
  nlohmann::json extra = nlohmann::json::object();  // keys titan does not model

  const std::string& architecture() const { return architectures.at(0); }
  bool is_llama() const { return architecture() == "LlamaForCausalLM"; }
  bool is_qwen3() const { return architecture() == "Qwen3ForCausalLM"; }
  bool is_qwen3_next() const { return architecture() == "Qwen3NextForCausalLM"; }
  // Qwen3.5's text model: Qwen3-Next's layers with dense MLPs and split GDN projections.
  bool is_qwen3_5() const { return architecture() == "Qwen3_5ForCausalLM"; }
  bool is_deepseek_v3() const { return architecture() == "DeepseekV3ForCausalLM"; }
  // DeepSeek-V3.2: DeepSeek-V3 plus DeepSeek sparse attention (models/mixers/dsa.h).
  bool is_deepseek_v32() const { return architecture() == "DeepseekV32ForCausalLM"; }
  // Titan's GQA form only ("kv_lora_rank": null; parse_hf_config refuses MLA).
  bool is_kimi_linear() const { return architecture() == "KimiLinearForCausalLM"; }
  bool is_qwen3_moe() const { return architecture() == "Qwen3MoeForCausalLM"; }
  bool is_gemma2() const { return architecture() == "Gemma2ForCausalLM"; }
};

// Parses a config object. `source` names it in errors ("config.json <source>: ...").
// Throws titan::Error for: an architecture other than the supported ones (naming
// it and the supported list), a missing required field (hidden_size,
// intermediate_size, num_hidden_layers, num_attention_heads, vocab_size), a field
// of the wrong JSON type, non-positive sizes, H % Hkv != 0, D % H != 0 without an
// explicit head_dim, an unsupported rope_scaling type (only "llama3" and
// "default"/null are), model_type other than deepseek_v3 / kimi_k2 for
// DeepseekV3ForCausalLM or other than deepseek_v32 for DeepseekV32ForCausalLM.
HFConfig parse_hf_config(const nlohmann::json& j, const std::string& source);

// Reads `path` (a config.json, or a directory containing one).
HFConfig load_hf_config(const std::string& path);

// The config as HF writes it (the modelled fields + `extra`).
nlohmann::json hf_config_to_json(const HFConfig& c);

// Writes hf_config_to_json(c) (indent 2) to `path` atomically.
void save_hf_config(const std::string& path, const HFConfig& c);

}  // namespace titan
