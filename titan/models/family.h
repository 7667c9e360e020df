// Model families: flavors (named configs), HF config.json mapping and the
// state-dict adapter between titan names (TorchTitan style) and Hugging Face names.
// A family is a set of functions registered by name; variants are config flags.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "titan/checkpoint/hf_config.h"
#include "titan/models/common/config.h"
#include "titan/nn/init.h"
#include "titan/nn/module.h"

namespace titan::models {

struct Family {
  std::string name;                                   // "llama3", "qwen3"
  std::map<std::string, TransformerConfig> flavors;   // "debugmodel", "qwen3_0.6b", ...
  std::string hf_architecture;                        // "LlamaForCausalLM", ...
  std::string hf_model_type;                          // "llama", "qwen3"
  nn::InitStyle init_style = nn::InitStyle::torchtitan_llama;  // InitScheme::family
  // The family's own config.json fields beyond HFConfig's (read from / written to
  // HFConfig::extra by one field table); null when it has none.
  void (*read_hf)(const HFConfig& hf, TransformerConfig& c) = nullptr;
  void (*write_hf)(const TransformerConfig& c, HFConfig& hf) = nullptr;
  // The family's checkpoint tensor layout where it differs from the shared adapter's
  // HF names (Llama 4's feed_forward.*, Qwen3.5's split GDN projections): checkpoint
  // tensors -> the adapter's names (load_hf_state_dict, before matching) and back
  // (hf_state_dict, after), for the model of config `c`; null = same.
  using TensorMapHook = std::map<std::string, Tensor> (*)(const std::map<std::string, Tensor>& hf,
                                                          const TransformerConfig& c);
  TensorMapHook hf_tensors_in = nullptr;
  TensorMapHook hf_tensors_out = nullptr;
};

// All registered families; throws titan::Error naming the family / flavor and the
// valid ones when absent.
const std::vector<Family>& families();
const Family& family(const std::string& name);
TransformerConfig flavor(const std::string& family_name, const std::string& flavor_name);

// config.json <-> TransformerConfig (family picked from `architectures`).
TransformerConfig config_from_hf(const HFConfig& hf);
HFConfig config_to_hf(const TransformerConfig& cfg);

// State-dict adapter. titan name <-> HF name, e.g.
//   layers.3.attention.wq.weight <-> model.layers.3.self_attn.q_proj.weight.
// Throws titan::Error naming the key when it has no counterpart. A block with
// post-norms (Gemma 2) maps ffn_norm to pre_feedforward_layernorm and
// attention_post_norm to post_attention_layernorm: load_hf_state_dict and hf_state_dict
// do so for such a model; to_hf_name alone gives the pre-norm block's names.
std::string to_hf_name(const std::string& titan_name);
std::string from_hf_name(const std::string& hf_name);

// Routed experts: titan holds them stacked (layers.{l}.moe.experts.w1/w2/w3, (E, ., .));
// HF checkpoints hold one tensor per expert (model.layers.{l}.mlp.experts.{e}.gate_proj
// / down_proj / up_proj.weight, what transformers' save_pretrained writes), or the
// fused transformers 5.x layout (mlp.experts.gate_up_proj (E, 2F, D) = [w1; w3] and
// mlp.experts.down_proj (E, D, F)). Loading accepts either; export writes per-expert
// tensors. Buffers (moe.expert_bias <-> mlp.gate.e_score_correction_bias) are loaded
// when present and exported.
//
// A Decoder of a family with hf_tensors_in / hf_tensors_out (Llama 4) reads and writes
// its family's layout through them.
// gpt-oss (experts with biases): the router is mlp.router.weight / .bias and the experts
// are GptOssExperts' packed tensors (gate_up_proj (E, D, 2F) gate/up interleaved,
// gate_up_proj_bias, down_proj (E, F, D), down_proj_bias); models/gpt_oss/gpt_oss.cpp.
// Export copies these (the others share storage).
//
// Copies HF-named tensors into the module's parameters (converted to f32). Every
// parameter must be present with its exact shape; HF keys with no counterpart
// (e.g. rotary inv_freq buffers) are ignored; lm_head.weight is ignored when tied.
// Errors name the tensor, the expected and the actual shape/dtype, and `source`.
void load_hf_state_dict(nn::Module& model, const std::map<std::string, Tensor>& hf,
                        const std::string& source);
// The module's parameters under HF names (shares storage; no copy). Throws
// titan::Error naming the parameter for a model repacked for inference.
std::map<std::string, Tensor> hf_state_dict(const nn::Module& model);

}  // namespace titan::models
