// Gemma 2 family (Gemma Team 2024, "Gemma 2: Improving Open Language Models at a
// Practical Size"; HF Gemma2ForCausalLM): local sliding-window and global attention
// layers alternating (layer_types, sliding_window 4096), attention-score and final-logit
// soft-caps (50 and 30), attention scale query_pre_attn_scalar^-1/2, sandwich norms
// (pre- and post-norm around the mixer and the feed-forward), gain-centred RMSNorm
// ((1 + w), w stored, init 0), a GeGLU feed-forward (gelu_pytorch_tanh), embeddings
// scaled by sqrt(hidden_size), tied LM head. Every one of these is a config flag of the
// shared decoder (models/common/config.h); the flavors are the published config.json
// values.
#include <cmath>

#include "titan/core/error.h"
#include "titan/models/family.h"
#include "titan/models/gemma2/gemma_config.h"

namespace titan::models {

// The Gemma 2 / Gemma 3 config.json reader and writer (gemma_config.h).
void read_gemma_fields(const HFConfig& hf, TransformerConfig& c, const GemmaDefaults& d) {
  const nlohmann::json& x = hf.extra;
  auto num = [&](const char* k, double def) {
    if (!x.contains(k)) return def;
    if (x.at(k).is_null()) return 0.0;
    TITAN_CHECK(x.at(k).is_number(), "config.json: field '{}' must be a number or null, got {}", k, x.at(k).dump());
    return x.at(k).get<double>();
  };
  c.post_norms = true;
  c.norm_unit_offset = true;
  c.embedding_multiplier = std::sqrt(static_cast<double>(hf.hidden_size));
  c.attn_logit_softcapping = num("attn_logit_softcapping", d.attn_logit_softcapping);
  c.final_logit_softcapping = num("final_logit_softcapping", d.final_logit_softcapping);
  c.query_pre_attn_scalar = num("query_pre_attn_scalar", 256.0);
  const double window = num("sliding_window", 4096.0);
  TITAN_CHECK(window >= 1 && window == std::floor(window) && window <= 1 << 30,
              "config.json: field 'sliding_window' must be an integer >= 1, got {}", window);
  c.sliding_window = static_cast<int64_t>(window);
  const char* act_key = x.contains("hidden_activation") ? "hidden_activation" : "hidden_act";
  c.hidden_act = x.contains(act_key) && x.at(act_key).is_string() ? x.at(act_key).get<std::string>() : "gelu_pytorch_tanh";
  if (x.contains("layer_types")) {
    TITAN_CHECK(x.at("layer_types").is_array(), "config.json: field 'layer_types' must be a list of strings");
    c.layer_types = x.at("layer_types").get<std::vector<std::string>>();
  } else {
    for (int64_t l = 0; l < hf.num_hidden_layers; ++l)
      c.layer_types.push_back((l + 1) % d.sliding_window_pattern ? "sliding_attention" : "full_attention");
  }
  TITAN_CHECK(!x.contains("use_bidirectional_attention") || x.at("use_bidirectional_attention").is_null() ||
                  !x.at("use_bidirectional_attention").get<bool>(),
              "config.json: use_bidirectional_attention = true is not supported (titan's attention is causal)");
}

void write_gemma_fields(const TransformerConfig& c, HFConfig& h) {
  auto cap = [](double v) { return v > 0 ? nlohmann::json(v) : nlohmann::json(nullptr); };
  h.extra["attn_logit_softcapping"] = cap(c.attn_logit_softcapping);
  h.extra["final_logit_softcapping"] = cap(c.final_logit_softcapping);
  // An integer in Gemma2Config / Gemma3TextConfig (transformers 5 validates the type).
  const double qpas = c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar : static_cast<double>(c.head_dim);
  if (qpas == std::floor(qpas) && qpas < 1e15)
    h.extra["query_pre_attn_scalar"] = static_cast<int64_t>(qpas);
  else
    h.extra["query_pre_attn_scalar"] = qpas;
  h.extra["sliding_window"] = c.sliding_window;
  h.extra["hidden_activation"] = c.hidden_act;
  h.extra["layer_types"] = c.layer_types;
}

TransformerConfig gemma_base_config(const std::string& family) {
  TransformerConfig c;
  c.family = family;
  c.post_norms = true;
  c.norm_unit_offset = true;
  c.hidden_act = "gelu_pytorch_tanh";
  c.rms_norm_eps = 1e-6;
  c.tie_word_embeddings = true;
  c.bos_token_id = 2;
  c.eos_token_id = 1;
  return c;
}

namespace {
void read_gemma2_fields(const HFConfig& hf, TransformerConfig& c) { read_gemma_fields(hf, c, {50.0, 30.0, 2}); }
}  // namespace

Family make_gemma2_family() {
  Family f;
  f.name = "gemma2";
  f.hf_architecture = "Gemma2ForCausalLM";
  f.hf_model_type = "gemma2";
  f.init_style = nn::InitStyle::gpt2;  // normal(0.02) (HF initializer_range)
  f.read_hf = read_gemma2_fields;
  f.write_hf = write_gemma_fields;
  TransformerConfig base = gemma_base_config("gemma2");
  base.attn_logit_softcapping = 50.0;
  base.final_logit_softcapping = 30.0;
  base.rope_theta = 10000;
  base.vocab_size = 256000;
  base.max_position_embeddings = 8192;
  base.sliding_window = 4096;
  auto sized = [&](int64_t D, int64_t F, int64_t L, int64_t H, int64_t Hkv, int64_t Dh, double qpas) {
    TransformerConfig c = base;
    c.hidden_size = D;
    c.intermediate_size = F;
    c.num_hidden_layers = L;
    c.num_attention_heads = H;
    c.num_key_value_heads = Hkv;
    c.head_dim = Dh;
    c.query_pre_attn_scalar = qpas;
    c.embedding_multiplier = std::sqrt(static_cast<double>(D));
    for (int64_t l = 0; l < L; ++l) c.layer_types.push_back((l + 1) % 2 ? "sliding_attention" : "full_attention");
    return c;
  };
  // Small debug model: 4 local/global pairs, window 64.
  TransformerConfig debug = sized(256, 768, 8, 4, 2, 64, 64);
  debug.vocab_size = 2048;
  debug.max_position_embeddings = 4096;
  debug.sliding_window = 64;
  debug.bos_token_id = debug.eos_token_id = -1;
  f.flavors["debugmodel"] = debug;
  // google/gemma-2-{2b,9b,27b} config.json.
  f.flavors["gemma2_2b"] = sized(2304, 9216, 26, 8, 4, 256, 256);
  f.flavors["gemma2_9b"] = sized(3584, 14336, 42, 16, 8, 256, 256);
  f.flavors["gemma2_27b"] = sized(4608, 36864, 46, 32, 16, 128, 144);
  return f;
}

}  // namespace titan::models
