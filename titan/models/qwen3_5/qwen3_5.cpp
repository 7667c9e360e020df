// Qwen3.5 family (HF Qwen3_5ForCausalLM, model_type qwen3_5_text: the text model of
// Qwen3.5): Qwen3-Next's hybrid of Gated DeltaNet linear_attention layers and gated full
// attention (sigmoid output gate, QK-RMSNorm, partial rotary 0.25, (1 + w) norms), with
// dense MLPs only. Its checkpoints split the Gated DeltaNet input projections:
//   in_proj_qkv (2·Hk·Dk + Hv·Dv, D) = [q (Hk·Dk) | k (Hk·Dk) | v (Hv·Dv)], heads in order,
//   in_proj_z (Hv·Dv, D), in_proj_b (Hv, D), in_proj_a (Hv, D),
// where the shared layer holds Qwen3-Next's fused, per-key-head grouped layout
//   in_proj_qkvz rows: for each key head h, [q_h (Dk), k_h (Dk), v_h (G·Dv), z_h (G·Dv)],
//   in_proj_ba rows:   for each key head h, [b_h (G), a_h (G)],   G = Hv / Hk,
// value head j = h·G + g belonging to key head h (transformers' repeat_interleave). The
// tensor hooks below move rows between the two layouts; the layer code is shared.
// Text-only mrope (rope_parameters.mrope_section) gives equal positions in every section,
// i.e. ordinary partial RoPE.
#include "titan/core/error.h"
#include "titan/models/family.h"
#include "titan/ops/join.h"

namespace titan::models {
namespace {

struct GdnDims {
  int64_t hk, dk, g, dv;
};
GdnDims gdn_dims(const TransformerConfig& c) {
  return {c.linear_num_key_heads, c.linear_key_head_dim, c.linear_num_value_heads / c.linear_num_key_heads,
          c.linear_value_head_dim};
}

// Splits "model.layers.{l}.linear_attn.{rest}" into prefix "model.layers.{l}.linear_attn." and rest.
bool gdn_key(const std::string& k, std::string& prefix, std::string& rest) {
  const std::string p = "model.layers.", m = ".linear_attn.";
  if (k.rfind(p, 0) != 0) return false;
  const size_t at = k.find(m, p.size());
  if (at == std::string::npos) return false;
  prefix = k.substr(0, at + m.size());
  rest = k.substr(at + m.size());
  return true;
}

const Tensor& need(const std::map<std::string, Tensor>& m, const std::string& k, int64_t rows,
                   const char* what) {
  auto it = m.find(k);
  TITAN_CHECK(it != m.end(), "{}: missing tensor '{}'", what, k);
  TITAN_CHECK(it->second.dim() == 2 && it->second.size(0) == rows, "{}: tensor '{}' has shape {}, expected {} rows",
              what, k, shape_str(it->second.shape()), rows);
  return it->second;
}

// Qwen3.5 checkpoint tensors -> Qwen3-Next's fused grouped in_proj_qkvz / in_proj_ba.
std::map<std::string, Tensor> qwen3_5_tensors_in(const std::map<std::string, Tensor>& in,
                                                 const TransformerConfig& c) {
  const char* what = "Qwen3.5 checkpoint";
  const auto [hk, dk, g, dv] = gdn_dims(c);
  std::map<std::string, Tensor> out;
  for (const auto& [k, t] : in) {
    std::string prefix, rest;
    if (!gdn_key(k, prefix, rest) || (rest != "in_proj_qkv.weight" && rest != "in_proj_z.weight" &&
                                      rest != "in_proj_b.weight" && rest != "in_proj_a.weight")) {
      out[k] = t;
      continue;
    }
    if (rest != "in_proj_qkv.weight") continue;  // the four are fused once, at the qkv key
    const Tensor qkv = need(in, k, 2 * hk * dk + hk * g * dv, what).contiguous();
    const Tensor z = need(in, prefix + "in_proj_z.weight", hk * g * dv, what).contiguous();
    const Tensor b = need(in, prefix + "in_proj_b.weight", hk * g, what).contiguous();
    const Tensor a = need(in, prefix + "in_proj_a.weight", hk * g, what).contiguous();
    std::vector<Tensor> qkvz, ba;
    for (int64_t h = 0; h < hk; ++h) {
      qkvz.push_back(qkv.narrow(0, h * dk, dk));
      qkvz.push_back(qkv.narrow(0, hk * dk + h * dk, dk));
      qkvz.push_back(qkv.narrow(0, 2 * hk * dk + h * g * dv, g * dv));
      qkvz.push_back(z.narrow(0, h * g * dv, g * dv));
      ba.push_back(b.narrow(0, h * g, g));
      ba.push_back(a.narrow(0, h * g, g));
    }
    out[prefix + "in_proj_qkvz.weight"] = cat(qkvz, 0);
    out[prefix + "in_proj_ba.weight"] = cat(ba, 0);
  }
  return out;
}

// The shared layer's fused grouped projections -> Qwen3.5's four tensors.
std::map<std::string, Tensor> qwen3_5_tensors_out(const std::map<std::string, Tensor>& in,
                                                  const TransformerConfig& c) {
  const char* what = "Qwen3.5 export";
  const auto [hk, dk, g, dv] = gdn_dims(c);
  const int64_t block = 2 * dk + 2 * g * dv;
  std::map<std::string, Tensor> out;
  for (const auto& [k, t] : in) {
    std::string prefix, rest;
    if (!gdn_key(k, prefix, rest) || (rest != "in_proj_qkvz.weight" && rest != "in_proj_ba.weight")) {
      out[k] = t;
      continue;
    }
    if (rest == "in_proj_ba.weight") {
      const Tensor ba = need(in, k, hk * 2 * g, what).contiguous();
      std::vector<Tensor> b, a;
      for (int64_t h = 0; h < hk; ++h) {
        b.push_back(ba.narrow(0, h * 2 * g, g));
        a.push_back(ba.narrow(0, h * 2 * g + g, g));
      }
      out[prefix + "in_proj_b.weight"] = cat(b, 0);
      out[prefix + "in_proj_a.weight"] = cat(a, 0);
      continue;
    }
    const Tensor qkvz = need(in, k, hk * block, what).contiguous();
    std::vector<Tensor> q, kk, v, z;
    for (int64_t h = 0; h < hk; ++h) {
      const int64_t r = h * block;
      q.push_back(qkvz.narrow(0, r, dk));
      kk.push_back(qkvz.narrow(0, r + dk, dk));
      v.push_back(qkvz.narrow(0, r + 2 * dk, g * dv));
      z.push_back(qkvz.narrow(0, r + 2 * dk + g * dv, g * dv));
    }
    std::vector<Tensor> qkv = q;
    qkv.insert(qkv.end(), kk.begin(), kk.end());
    qkv.insert(qkv.end(), v.begin(), v.end());
    out[prefix + "in_proj_qkv.weight"] = cat(qkv, 0);
    out[prefix + "in_proj_z.weight"] = cat(z, 0);
  }
  return out;
}

// Qwen3_5TextConfig has no mixture-of-experts fields (Qwen3.5-MoE is qwen3_5_moe).
void read_qwen3_5_fields(const HFConfig& hf, TransformerConfig& c) {
  TITAN_CHECK(c.num_experts == 0,
              "config.json: Qwen3_5ForCausalLM has dense MLPs only, got num_experts = {} (the Qwen3.5 MoE "
              "models are model_type qwen3_5_moe, not supported)", c.num_experts);
  (void)hf;
}
void write_qwen3_5_fields(const TransformerConfig&, HFConfig& hf) {
  hf.extra.erase("num_experts");
  hf.extra.erase("mlp_only_layers");
}

}  // namespace

Family make_qwen3_next_family();  // models/qwen3_next

Family make_qwen3_5_family() {
  Family f;
  f.name = "qwen3_5";
  f.hf_architecture = "Qwen3_5ForCausalLM";
  f.hf_model_type = "qwen3_5_text";
  f.init_style = nn::InitStyle::gpt2;  // normal(0.02) (HF initializer_range)
  f.read_hf = read_qwen3_5_fields;
  f.write_hf = write_qwen3_5_fields;
  f.hf_tensors_in = qwen3_5_tensors_in;
  f.hf_tensors_out = qwen3_5_tensors_out;
  // Qwen3-Next's debug model (3 GDN layers then 1 full-attention layer, twice; dense).
  TransformerConfig debug = make_qwen3_next_family().flavors.at("debugmodel");
  debug.family = "qwen3_5";
  f.flavors["debugmodel"] = debug;

  // Qwen3_5TextConfig's defaults (transformers 5.24), the dense text model of that size:
  // vocab 248320, D 4096, FFN 12288, 32 layers, full attention every 4th, 16 heads of 256
  // over 4 KV heads, linear 16 key / 32 value heads of 128.
  TransformerConfig big = debug;
  big.vocab_size = 248320;
  big.hidden_size = 4096;
  big.intermediate_size = 12288;
  big.num_hidden_layers = 32;
  big.num_attention_heads = 16;
  big.num_key_value_heads = 4;
  big.head_dim = 256;
  big.max_position_embeddings = 32768;
  big.linear_num_key_heads = 16;
  big.linear_num_value_heads = 32;
  big.linear_key_head_dim = 128;
  big.linear_value_head_dim = 128;
  big.tie_word_embeddings = false;
  big.layer_types.clear();
  for (int64_t l = 0; l < big.num_hidden_layers; ++l)
    big.layer_types.push_back((l + 1) % 4 ? "linear_attention" : "full_attention");
  f.flavors["qwen3_5_text_default"] = big;
  return f;
}

}  // namespace titan::models
