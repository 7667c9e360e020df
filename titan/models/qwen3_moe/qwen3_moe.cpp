// Qwen3-MoE family (HF Qwen3MoeForCausalLM): the Qwen3 block (QK-RMSNorm, GQA, RoPE)
// whose feed-forward is, on the sparse layers, a softmax top-k router over
// num_experts SwiGLU experts of moe_intermediate_size (models/ffn/moe.h) with
// norm_topk_prob. Flavors from the published HF config.json values; the two large
// ones serve for sizing (parameter / FLOP counts) and are never allocated by tests.
#include <nlohmann/json.hpp>

#include "titan/core/error.h"
#include "titan/models/family.h"

namespace titan::models {

namespace {

// The MoE fields of Qwen3MoeConfig beyond the shared HFConfig ones, one table read and
// written by the same code (HF name, member, kind).
enum class Kind { i64, boolean, i64_list };
struct HfField {
  const char* name;
  Kind kind;
  int64_t TransformerConfig::*i = nullptr;
  bool TransformerConfig::*b = nullptr;
  std::vector<int64_t> TransformerConfig::*list = nullptr;
};
const std::vector<HfField>& moe_fields() {
  static const std::vector<HfField> f = {
      {"num_experts", Kind::i64, &TransformerConfig::num_experts},
      {"num_experts_per_tok", Kind::i64, &TransformerConfig::num_experts_per_tok},
      {"moe_intermediate_size", Kind::i64, &TransformerConfig::moe_intermediate_size},
      {"decoder_sparse_step", Kind::i64, &TransformerConfig::decoder_sparse_step},
      {"norm_topk_prob", Kind::boolean, nullptr, &TransformerConfig::norm_topk_prob},
      {"mlp_only_layers", Kind::i64_list, nullptr, nullptr, &TransformerConfig::mlp_only_layers},
  };
  return f;
}

// transformers 5.x writes num_experts as num_local_experts; both are read.
const char* key_in(const nlohmann::json& x, const char* name) {
  if (x.contains(name)) return name;
  if (std::string(name) == "num_experts" && x.contains("num_local_experts")) return "num_local_experts";
  return nullptr;
}

void read_qwen3_moe(const HFConfig& hf, TransformerConfig& c) {
  const nlohmann::json& x = hf.extra;
  for (const HfField& f : moe_fields()) {
    const char* k = key_in(x, f.name);
    if (f.kind == Kind::i64 && std::string(f.name) != "decoder_sparse_step")
      TITAN_CHECK(k != nullptr, "config.json: Qwen3MoeForCausalLM needs the field '{}'", f.name);
    if (!k) continue;
    const nlohmann::json& v = x.at(k);
    switch (f.kind) {
      case Kind::i64:
        TITAN_CHECK(v.is_number_integer(), "config.json: '{}' must be an integer, got {}", k, v.dump());
        c.*f.i = v.get<int64_t>();
        break;
      case Kind::boolean:
        TITAN_CHECK(v.is_boolean(), "config.json: '{}' must be true or false, got {}", k, v.dump());
        c.*f.b = v.get<bool>();
        break;
      case Kind::i64_list:
        TITAN_CHECK(v.is_null() || v.is_array(), "config.json: '{}' must be a list of layer indices, got {}", k,
                    v.dump());
        c.*f.list = v.is_null() ? std::vector<int64_t>{} : v.get<std::vector<int64_t>>();
        break;
    }
  }
  TITAN_CHECK(c.num_experts > 0, "config.json: num_experts must be > 0 for Qwen3MoeForCausalLM, got {}",
              c.num_experts);
  // Qwen3MoeConfig's router_aux_loss_coef is the Switch-style global balancing loss
  // (applied only with output_router_logits); titan's router_aux_loss_coef is DeepSeek's
  // sequence loss, so it stays 0 and the HF keys round-trip through `extra`.
  c.router_aux_loss_coef = 0.0;
}

void write_qwen3_moe(const TransformerConfig& c, HFConfig& h) {
  h.extra.erase("num_local_experts");
  for (const HfField& f : moe_fields()) {
    switch (f.kind) {
      case Kind::i64: h.extra[f.name] = c.*f.i; break;
      case Kind::boolean: h.extra[f.name] = c.*f.b; break;
      case Kind::i64_list: h.extra[f.name] = c.*f.list; break;
    }
  }
}

}  // namespace

Family make_qwen3_moe_family() {
  Family f;
  f.name = "qwen3_moe";
  f.hf_architecture = "Qwen3MoeForCausalLM";
  f.hf_model_type = "qwen3_moe";
  f.init_style = nn::InitStyle::gpt2;  // normal(0.02) (HF initializer_range)
  f.read_hf = read_qwen3_moe;
  f.write_hf = write_qwen3_moe;
  TransformerConfig base;
  base.family = "qwen3_moe";
  base.qk_norm = true;
  base.rms_norm_eps = 1e-6;
  base.rope_theta = 1000000;
  base.norm_topk_prob = true;
  base.scoring_func = "softmax";

  // Small CPU debug model: 4 layers, 8 experts of width 256, 2 per token, every layer MoE.
  TransformerConfig debug = base;
  debug.vocab_size = 2048;
  debug.hidden_size = 256;
  debug.intermediate_size = 768;
  debug.num_hidden_layers = 4;
  debug.num_attention_heads = 8;
  debug.num_key_value_heads = 4;
  debug.head_dim = 32;
  debug.max_position_embeddings = 4096;
  debug.tie_word_embeddings = true;
  debug.num_experts = 8;
  debug.num_experts_per_tok = 2;
  debug.moe_intermediate_size = 256;
  f.flavors["debugmodel"] = debug;

  // Qwen/Qwen3-30B-A3B config.json.
  TransformerConfig a3b = base;
  a3b.vocab_size = 151936;
  a3b.hidden_size = 2048;
  a3b.intermediate_size = 6144;
  a3b.num_hidden_layers = 48;
  a3b.num_attention_heads = 32;
  a3b.num_key_value_heads = 4;
  a3b.head_dim = 128;
  a3b.max_position_embeddings = 40960;
  a3b.num_experts = 128;
  a3b.num_experts_per_tok = 8;
  a3b.moe_intermediate_size = 768;
  a3b.bos_token_id = 151643;
  a3b.eos_token_id = 151645;
  f.flavors["qwen3_30b_a3b"] = a3b;

  // Qwen/Qwen3-235B-A22B config.json.
  TransformerConfig a22b = a3b;
  a22b.hidden_size = 4096;
  a22b.intermediate_size = 12288;
  a22b.num_hidden_layers = 94;
  a22b.num_attention_heads = 64;
  a22b.moe_intermediate_size = 1536;
  f.flavors["qwen3_235b_a22b"] = a22b;
  return f;
}

}  // namespace titan::models
