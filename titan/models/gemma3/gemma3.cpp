// Gemma 3 text family (Gemma Team 2025, "Gemma 3 Technical Report"; HF
// Gemma3ForCausalLM, model_type gemma3_text): Gemma 2's block (sandwich norms,
// gain-centred norms, GeGLU, scaled embeddings, query_pre_attn_scalar) with 5 local
// sliding-window layers per global layer, QK-RMSNorm (gain-centred) in place of the
// attention soft-cap, and two RoPE thetas: rope_theta on the global layers,
// rope_local_base_freq (transformers 5: rope_parameters.sliding_attention.rope_theta)
// on the local ones. A full-attention RoPE with linear scaling (the 4B-27B checkpoints)
// is refused by the config reader (rope_type 'linear' is not supported).
#include "titan/core/error.h"
#include "titan/models/family.h"
#include "titan/models/gemma2/gemma_config.h"

#include <cmath>

namespace titan::models {

namespace {

void read_gemma3_fields(const HFConfig& hf, TransformerConfig& c) {
  read_gemma_fields(hf, c, {0.0, 0.0, 6});
  c.qk_norm = true;
  const nlohmann::json& x = hf.extra;
  c.rope_local_base_freq = 10000.0;
  if (x.contains("rope_local_base_freq") && x.at("rope_local_base_freq").is_number())
    c.rope_local_base_freq = x.at("rope_local_base_freq").get<double>();
  if (x.contains("rope_parameters") && x.at("rope_parameters").contains("sliding_attention")) {
    const nlohmann::json& s = x.at("rope_parameters").at("sliding_attention");
    TITAN_CHECK(s.is_object(), "config.json: rope_parameters.sliding_attention must be an object");
    const std::string type = s.contains("rope_type") && s.at("rope_type").is_string() ? s.at("rope_type").get<std::string>()
                                                                                       : "default";
    TITAN_CHECK(type == "default", "config.json: rope_parameters.sliding_attention.rope_type '{}' is not supported "
                "(default)", type);
    if (s.contains("rope_theta")) {
      TITAN_CHECK(s.at("rope_theta").is_number(), "config.json: rope_parameters.sliding_attention.rope_theta must be a number");
      c.rope_local_base_freq = s.at("rope_theta").get<double>();
    }
  }
}

void write_gemma3_fields(const TransformerConfig& c, HFConfig& h) {
  write_gemma_fields(c, h);
  h.extra["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", c.rope_theta}}},
                                {"sliding_attention",
                                 {{"rope_type", "default"}, {"rope_theta", c.rope_local_base_freq}}}};
}

}  // namespace

Family make_gemma3_family() {
  Family f;
  f.name = "gemma3";
  f.hf_architecture = "Gemma3ForCausalLM";
  f.hf_model_type = "gemma3_text";
  f.init_style = nn::InitStyle::gpt2;  // normal(0.02) (HF initializer_range)
  f.read_hf = read_gemma3_fields;
  f.write_hf = write_gemma3_fields;
  TransformerConfig base = gemma_base_config("gemma3");
  base.qk_norm = true;
  base.rope_theta = 1000000;
  base.rope_local_base_freq = 10000;
  auto sized = [&](int64_t V, int64_t D, int64_t F, int64_t L, int64_t H, int64_t Hkv, int64_t Dh, double qpas,
                   int64_t window, int64_t ctx) {
    TransformerConfig c = base;
    c.vocab_size = V;
    c.hidden_size = D;
    c.intermediate_size = F;
    c.num_hidden_layers = L;
    c.num_attention_heads = H;
    c.num_key_value_heads = Hkv;
    c.head_dim = Dh;
    c.query_pre_attn_scalar = qpas;
    c.sliding_window = window;
    c.max_position_embeddings = ctx;
    c.embedding_multiplier = std::sqrt(static_cast<double>(D));
    for (int64_t l = 0; l < L; ++l) c.layer_types.push_back((l + 1) % 6 ? "sliding_attention" : "full_attention");
    return c;
  };
  // Small debug model: 5 local layers (window 64) then 1 global.
  TransformerConfig debug = sized(2048, 256, 768, 6, 4, 2, 64, 64, 64, 4096);
  debug.bos_token_id = debug.eos_token_id = -1;
  f.flavors["debugmodel"] = debug;
  // google/gemma-3-1b-pt config.json (text only, no RoPE scaling).
  f.flavors["gemma3_1b"] = sized(262144, 1152, 6912, 26, 4, 1, 256, 256, 512, 32768);
  return f;
}

}  // namespace titan::models
