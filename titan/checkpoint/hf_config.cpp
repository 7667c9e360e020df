#include "titan/checkpoint/hf_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <tuple>
#include <vector>

#include "titan/config/limits.h"
#include "titan/core/error.h"
#include "titan/core/fs.h"
#include "titan/core/json_read.h"

namespace titan {

namespace {

using json = nlohmann::json;

// Field readers: absent or null -> nullopt; wrong type -> titan::Error.
struct Fields {
  const json& j;
  std::string where;  // "config.json <source>"
  std::set<std::string>* used;

  const json* get(const std::string& key) const {
    if (used) used->insert(key);
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }
  [[noreturn]] void bad_type(const std::string& key, const char* want, const json& v) const {
    fail("{}: field '{}' must be {}, got {}", where, key, want, json_excerpt(v));
  }
  std::optional<int64_t> i64(const std::string& key) const {
    const json* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_number_integer()) bad_type(key, "an integer", *v);
    return v->get<int64_t>();
  }
  int64_t required_i64(const std::string& key) const {
    auto v = i64(key);
    if (!v) fail("{}: missing required field '{}'", where, key);
    return *v;
  }
  std::optional<double> f64(const std::string& key) const {
    const json* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_number()) bad_type(key, "a number", *v);
    return v->get<double>();
  }
  std::optional<bool> boolean(const std::string& key) const {
    const json* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) bad_type(key, "true or false", *v);
    return v->get<bool>();
  }
  std::optional<std::string> str(const std::string& key) const {
    const json* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) bad_type(key, "a string", *v);
    return v->get<std::string>();
  }
};

std::string supported_list() {
  std::string s;
  for (const char* a : kSupportedArchitectures) s += (s.empty() ? "" : ", ") + std::string(a);
  return s;
}

bool is_supported(const std::string& arch) {
  for (const char* a : kSupportedArchitectures)
    if (arch == a) return true;
  return false;
}

// Each architecture's transformers model_type names, its default first. transformers builds
// the model from model_type (AutoConfig); architectures is a label beside it.
struct ArchModelTypes {
  const char* architecture;
  std::vector<std::string> model_types;
};
const std::vector<ArchModelTypes>& arch_model_types() {
  static const std::vector<ArchModelTypes> t = {
      {"LlamaForCausalLM", {"llama"}},
      {"Qwen3ForCausalLM", {"qwen3"}},
      {"Qwen3NextForCausalLM", {"qwen3_next"}},
      {"Qwen3_5ForCausalLM", {"qwen3_5_text"}},
      {"DeepseekV3ForCausalLM", {"deepseek_v3", "kimi_k2"}},
      {"Qwen3MoeForCausalLM", {"qwen3_moe"}},
      {"DeepseekV32ForCausalLM", {"deepseek_v32"}},
      {"KimiLinearForCausalLM", {"kimi_linear"}},
      {"Gemma2ForCausalLM", {"gemma2"}},
      {"Gemma3ForCausalLM", {"gemma3_text"}},
      {"Llama4ForCausalLM", {"llama4_text"}},
      {"GptOssForCausalLM", {"gpt_oss"}},
  };
  return t;
}
const ArchModelTypes* by_architecture(const std::string& arch) {
  for (const ArchModelTypes& a : arch_model_types())
    if (arch == a.architecture) return &a;
  return nullptr;
}
bool has_model_type(const ArchModelTypes& a, const std::string& model_type) {
  return std::find(a.model_types.begin(), a.model_types.end(), model_type) != a.model_types.end();
}

// rope_scaling (or transformers v5 rope_parameters) -> HFRopeScaling / nullopt.
std::optional<HFRopeScaling> parse_rope_scaling(const json& rs, const std::string& where, const std::string& key) {
  if (rs.is_null()) return std::nullopt;
  if (!rs.is_object()) fail("{}: field '{}' must be an object or null, got {}", where, key, json_excerpt(rs));
  Fields f{rs, where + " " + key, nullptr};
  auto type = f.str("rope_type");
  if (!type) type = f.str("type");  // older configs
  if (!type || *type == "default") return std::nullopt;
  if (*type != "llama3" && *type != "yarn")
    fail("{}: unsupported {} rope_type '{}' (supported: llama3, yarn, default, or null)", where, key, *type);
  HFRopeScaling s;
  if (*type == "yarn") {
    s.rope_type = "yarn";
    auto factor = f.f64("factor");
    if (!factor || !(*factor > 0)) fail("{}: {} of rope_type yarn needs a positive 'factor'", where, key);
    s.factor = *factor;
    auto omax = f.i64("original_max_position_embeddings");
    if (!omax || *omax <= 0)
      fail("{}: {} of rope_type yarn needs a positive 'original_max_position_embeddings'", where, key);
    s.original_max_position_embeddings = *omax;
    s.beta_fast = f.f64("beta_fast").value_or(32.0);
    s.beta_slow = f.f64("beta_slow").value_or(1.0);
    if (!(s.beta_fast >= s.beta_slow && s.beta_slow > 0))
      fail("{}: {}: yarn needs beta_fast ({}) >= beta_slow ({}) > 0", where, key, s.beta_fast, s.beta_slow);
    s.mscale = f.f64("mscale").value_or(0.0);
    s.mscale_all_dim = f.f64("mscale_all_dim").value_or(0.0);
    s.truncate = f.boolean("truncate").value_or(true);
    if (auto af = f.f64("attention_factor"))
      fail("{}: {}.attention_factor = {} is not supported (titan derives it from mscale / mscale_all_dim)", where,
           key, *af);
    return s;
  }
  auto need = [&](const char* k) {
    auto v = f.f64(k);
    if (!v) fail("{}: {} of rope_type llama3 is missing '{}'", where, key, k);
    if (!(*v > 0)) fail("{}: {}.{} must be positive, got {}", where, key, k, *v);
    return *v;
  };
  s.factor = need("factor");
  s.low_freq_factor = need("low_freq_factor");
  s.high_freq_factor = need("high_freq_factor");
  auto omax = f.i64("original_max_position_embeddings");
  if (!omax || *omax <= 0)
    fail("{}: {} of rope_type llama3 needs a positive 'original_max_position_embeddings'", where, key);
  s.original_max_position_embeddings = *omax;
  // Equal factors (Llama 4 Scout: 1 and 1) leave no interpolated band; transformers warns
  // and computes the same frequencies.
  if (s.high_freq_factor < s.low_freq_factor)
    fail("{}: {}: high_freq_factor ({}) must be >= low_freq_factor ({})", where, key, s.high_freq_factor,
         s.low_freq_factor);
  return s;
}

}  // namespace

HFConfig parse_hf_config(const json& j, const std::string& source) {
  const std::string where = "config.json " + source;
  if (!j.is_object()) fail("{}: expected a JSON object, got {}", where, j.type_name());
  std::set<std::string> used;
  Fields f{j, where, &used};
  HFConfig c;

  // Architecture: the first listed, or inferred from model_type.
  if (const json* a = f.get("architectures")) {
    if (!a->is_array() || a->empty()) f.bad_type("architectures", "a non-empty list of strings", *a);
    for (const json& x : *a) {
      if (!x.is_string()) f.bad_type("architectures", "a non-empty list of strings", *a);
      c.architectures.push_back(x.get<std::string>());
    }
  }
  c.model_type = f.str("model_type").value_or("");
  if (c.architectures.empty()) {
    for (const ArchModelTypes& a : arch_model_types())
      if (has_model_type(a, c.model_type)) c.architectures = {a.architecture};
    if (c.architectures.empty())
      fail("{}: no 'architectures' and model_type '{}' is not one titan knows (supported architectures: {})",
           where, c.model_type, supported_list());
  }
  // Kimi Linear: HF's full-attention layers are MLA (kv_lora_rank, default 512); titan's
  // kimi_linear pairs Kimi Delta Attention with GQA, written as "kv_lora_rank": null.
  if (c.architectures[0] == "KimiLinearForCausalLM") {
    if (!(j.contains("kv_lora_rank") && j.at("kv_lora_rank").is_null()))
      fail("{}: KimiLinearForCausalLM with MLA full attention (kv_lora_rank = {}) is not supported: this build's "
           "kimi_linear pairs Kimi Delta Attention with GQA (\"kv_lora_rank\": null)", where,
           j.contains("kv_lora_rank") ? j.at("kv_lora_rank").dump() : "512, HF's default");
    used.insert("kv_lora_rank");
  } else if (c.architectures[0] == "Qwen3_5ForConditionalGeneration" || c.model_type == "qwen3_5") {
    fail("{}: the multimodal Qwen3.5 wrapper ({}, model_type '{}') is not supported: load its text model "
         "(text_config, model_type qwen3_5_text, Qwen3_5ForCausalLM)", where, c.architectures[0], c.model_type);
  } else if (!is_supported(c.architectures[0]))
    fail("{}: unsupported architecture '{}' (supported: {})", where, c.architectures[0], supported_list());
  // A config whose model_type is not its architecture's (LlamaForCausalLM with 'mistral')
  // is another model in transformers: refused.
  if (const ArchModelTypes* a = by_architecture(c.architectures[0])) {
    if (c.model_type.empty()) c.model_type = a->model_types.front();
    if (!has_model_type(*a, c.model_type))
      fail("{}: model_type '{}' is not one titan knows for {} ({}); transformers would build another model from it",
           where, c.model_type, a->architecture, fmt::join(a->model_types, ", "));
  }

  c.hidden_size = f.required_i64("hidden_size");
  c.intermediate_size = f.required_i64("intermediate_size");
  c.num_hidden_layers = f.required_i64("num_hidden_layers");
  c.num_attention_heads = f.required_i64("num_attention_heads");
  c.vocab_size = f.required_i64("vocab_size");
  for (auto [k, v, limit] :
       {std::tuple{"hidden_size", c.hidden_size, config::kMaxHiddenSize},
        {"intermediate_size", c.intermediate_size, config::kMaxIntermediateSize},
        {"num_hidden_layers", c.num_hidden_layers, config::kMaxLayers},
        {"num_attention_heads", c.num_attention_heads, config::kMaxHeads}, {"vocab_size", c.vocab_size, config::kMaxVocabSize}}) {
    TITAN_CHECK(v > 0, "{}: field '{}' must be positive, got {}", where, k, v);
    TITAN_CHECK(v <= limit, "{}: field '{}' = {} exceeds the limit of {}", where, k, v, limit);
  }
  const int64_t H = c.num_attention_heads;
  c.num_key_value_heads = f.i64("num_key_value_heads").value_or(H);
  TITAN_CHECK(c.num_key_value_heads <= config::kMaxHeads, "{}: field 'num_key_value_heads' = {} exceeds the limit of {}",
              where, c.num_key_value_heads, config::kMaxHeads);
  TITAN_CHECK(c.num_key_value_heads > 0 && H % c.num_key_value_heads == 0,
              "{}: num_key_value_heads ({}) must be positive and divide num_attention_heads ({})", where,
              c.num_key_value_heads, H);
  if (auto hd = f.i64("head_dim")) {
    TITAN_CHECK(*hd > 0 && *hd <= config::kMaxHeadDim, "{}: field 'head_dim' must be in [1, {}], got {}", where,
                config::kMaxHeadDim, *hd);
    c.head_dim = *hd;
  } else {
    TITAN_CHECK(c.hidden_size % H == 0,
                "{}: no head_dim and hidden_size ({}) is not divisible by num_attention_heads ({})", where,
                c.hidden_size, H);
    c.head_dim = c.hidden_size / H;
  }
  c.max_position_embeddings = f.i64("max_position_embeddings").value_or(c.is_llama() ? 2048 : 32768);
  TITAN_CHECK(c.max_position_embeddings > 0 && c.max_position_embeddings <= config::kMaxPositions,
              "{}: field 'max_position_embeddings' must be in [1, {}], got {}", where, config::kMaxPositions,
              c.max_position_embeddings);
  c.rms_norm_eps = f.f64("rms_norm_eps").value_or(1e-6);
  TITAN_CHECK(c.rms_norm_eps > 0, "{}: field 'rms_norm_eps' must be positive, got {}", where, c.rms_norm_eps);

  // RoPE: top-level rope_theta/rope_scaling, or transformers v5 rope_parameters.
  std::optional<double> theta = f.f64("rope_theta");
  if (const json* rs = f.get("rope_scaling")) c.rope_scaling = parse_rope_scaling(*rs, where, "rope_scaling");
  if (const json* rp = f.get("rope_parameters")) {
    if (!rp->is_object()) f.bad_type("rope_parameters", "an object", *rp);
    // Per layer type (Gemma 3: {"full_attention": {...}, "sliding_attention": {...}}): the
    // full-attention entry is the model's RoPE; the whole object stays in `extra` for
    // the family's reader (the sliding layers' theta).
    const bool per_type = rp->contains("full_attention");
    if (per_type) {
      c.extra["rope_parameters"] = *rp;
      rp = &rp->at("full_attention");
      if (!rp->is_object()) f.bad_type("rope_parameters.full_attention", "an object", *rp);
    }
    if (!theta) theta = Fields{*rp, where + " rope_parameters", nullptr}.f64("rope_theta");
    if (!c.rope_scaling) c.rope_scaling = parse_rope_scaling(*rp, where, "rope_parameters");
  }
  std::optional<double> prf = f.f64("partial_rotary_factor");
  if (const json* rp = j.contains("rope_parameters") ? &j.at("rope_parameters") : nullptr; rp && !prf)
    prf = Fields{*rp, where + " rope_parameters", nullptr}.f64("partial_rotary_factor");
  c.partial_rotary_factor = prf.value_or(1.0);
  TITAN_CHECK(c.partial_rotary_factor > 0 && c.partial_rotary_factor <= 1,
              "{}: field 'partial_rotary_factor' must be in (0, 1], got {}", where, c.partial_rotary_factor);
  c.rope_theta = theta.value_or(10000.0);
  TITAN_CHECK(c.rope_theta > 0, "{}: field 'rope_theta' must be positive, got {}", where, c.rope_theta);

  c.tie_word_embeddings = f.boolean("tie_word_embeddings").value_or(false);
  c.attention_bias = f.boolean("attention_bias").value_or(false);
  c.bos_token_id = f.i64("bos_token_id");
  if (const json* e = f.get("eos_token_id")) {
    if (e->is_number_integer()) {
      c.eos_token_id = {e->get<int64_t>()};
    } else if (e->is_array()) {
      for (const json& x : *e) {
        if (!x.is_number_integer()) f.bad_type("eos_token_id", "an integer or a list of integers", *e);
        c.eos_token_id.push_back(x.get<int64_t>());
      }
    } else {
      f.bad_type("eos_token_id", "an integer or a list of integers", *e);
    }
  }
  c.torch_dtype = f.str("torch_dtype").value_or("");
  if (auto d = f.str("dtype"); d && c.torch_dtype.empty()) c.torch_dtype = *d;

  for (const auto& [k, v] : j.items())
    if (!used.count(k)) c.extra[k] = v;
  return c;
}

HFConfig load_hf_config(const std::string& path) {
  std::string file = path;
  if (dir_exists(path)) file = (path.back() == '/' ? path : path + "/") + "config.json";
  if (!file_exists(file)) fail("config.json {}: file not found", file);
  // Bounded nesting: `extra` is copied, and copies recurse once per level.
  return parse_hf_config(parse_json(read_file(file), "config.json " + file), file);
}

json hf_config_to_json(const HFConfig& c) {
  json j = c.extra.is_object() ? c.extra : json::object();
  j["architectures"] = c.architectures;
  j["model_type"] = c.model_type;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  if (c.partial_rotary_factor != 1.0) j["partial_rotary_factor"] = c.partial_rotary_factor;
  if (c.rope_scaling && c.rope_scaling->rope_type == "yarn") {
    const HFRopeScaling& s = *c.rope_scaling;
    j["rope_scaling"] = {{"rope_type", "yarn"},
                         {"factor", s.factor},
                         {"original_max_position_embeddings", s.original_max_position_embeddings},
                         {"beta_fast", s.beta_fast},
                         {"beta_slow", s.beta_slow}};
    if (s.mscale != 0) j["rope_scaling"]["mscale"] = s.mscale;
    if (s.mscale_all_dim != 0) j["rope_scaling"]["mscale_all_dim"] = s.mscale_all_dim;
    if (!s.truncate) j["rope_scaling"]["truncate"] = false;
  } else if (c.rope_scaling) {
    const HFRopeScaling& s = *c.rope_scaling;
    j["rope_scaling"] = {{"rope_type", s.rope_type},
                         {"factor", s.factor},
                         {"low_freq_factor", s.low_freq_factor},
                         {"high_freq_factor", s.high_freq_factor},
                         {"original_max_position_embeddings", s.original_max_position_embeddings}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["attention_bias"] = c.attention_bias;
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_id.size() == 1) j["eos_token_id"] = c.eos_token_id[0];
  else if (!c.eos_token_id.empty()) j["eos_token_id"] = c.eos_token_id;
  if (!c.torch_dtype.empty()) j["torch_dtype"] = c.torch_dtype;
  return j;
}

void save_hf_config(const std::string& path, const HFConfig& c) {
  write_file_atomic(path, hf_config_to_json(c).dump(2) + "\n");
}

}  // namespace titan
