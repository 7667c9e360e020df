#include "titan/models/common/layer_spec.h"

#include <algorithm>

namespace titan::models {

const char* mixer_kind_name(MixerKind k) {
  switch (k) {
    case MixerKind::gqa: return "gqa";
    case MixerKind::gdn: return "gdn";
    case MixerKind::mla: return "mla";
    case MixerKind::kda: return "kda";
    case MixerKind::dsa: return "dsa";
  }
  return "?";
}

const char* ffn_kind_name(FfnKind k) {
  switch (k) {
    case FfnKind::dense: return "dense";
    case FfnKind::moe: return "moe";
  }
  return "?";
}

bool TransformerConfig::is_moe_layer(int64_t l) const {
  if (!is_moe()) return false;
  if (l < first_k_dense_replace) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), l) != mlp_only_layers.end()) return false;
  return decoder_sparse_step > 0 && (l + 1) % decoder_sparse_step == 0;
}

bool TransformerConfig::is_linear_attention_layer(int64_t l) const {
  return l >= 0 && l < static_cast<int64_t>(layer_types.size()) &&
         layer_types[static_cast<size_t>(l)] == "linear_attention";
}

int64_t TransformerConfig::layer_window(int64_t l) const {
  if (layer_types.empty()) return sliding_window;
  return l >= 0 && l < static_cast<int64_t>(layer_types.size()) &&
                 layer_types[static_cast<size_t>(l)] == "sliding_attention"
             ? sliding_window
             : 0;
}

int64_t TransformerConfig::layer_chunk(int64_t l) const {
  return l >= 0 && l < static_cast<int64_t>(layer_types.size()) &&
                 layer_types[static_cast<size_t>(l)] == "chunked_attention"
             ? attention_chunk_size
             : 0;
}

bool TransformerConfig::layer_uses_rope(int64_t l) const {
  return l < 0 || l >= static_cast<int64_t>(no_rope_layers.size()) || no_rope_layers[static_cast<size_t>(l)] != 0;
}

int64_t TransformerConfig::rotary_dim() const {
  return static_cast<int64_t>(static_cast<double>(head_dim) * partial_rotary_factor);
}

std::vector<LayerSpec> layer_specs(const TransformerConfig& cfg) {
  std::vector<LayerSpec> out;
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    LayerSpec s;
    s.mixer = cfg.is_linear_attention_layer(l) ? (cfg.linear_attn_type == "kda" ? MixerKind::kda : MixerKind::gdn)
              : cfg.is_dsa()                     ? MixerKind::dsa
              : cfg.is_mla()                     ? MixerKind::mla
                                                 : MixerKind::gqa;
    s.ffn = cfg.is_moe_layer(l) ? FfnKind::moe : FfnKind::dense;
    s.window = s.mixer == MixerKind::gqa ? cfg.layer_window(l) : 0;
    s.chunk = s.mixer == MixerKind::gqa ? cfg.layer_chunk(l) : 0;
    s.use_rope = (s.mixer == MixerKind::gqa || s.mixer == MixerKind::mla || s.mixer == MixerKind::dsa) &&
                 cfg.layer_uses_rope(l);
    out.push_back(s);
  }
  return out;
}

std::string describe_layers(const std::vector<LayerSpec>& specs) {
  std::string out;
  for (size_t i = 0; i < specs.size();) {
    size_t j = i;
    while (j + 1 < specs.size() && specs[j + 1] == specs[i]) ++j;
    if (!out.empty()) out += ", ";
    out += "L" + std::to_string(i) + (j > i ? "-" + std::to_string(j) : "") + " " +
           mixer_kind_name(specs[i].mixer) + "+" + ffn_kind_name(specs[i].ffn);
    if (specs[i].window > 0) out += " window " + std::to_string(specs[i].window);
    if (specs[i].chunk > 0) out += " chunk " + std::to_string(specs[i].chunk);
    if (specs[i].mixer == MixerKind::gqa && !specs[i].use_rope) out += " nope";
    i = j + 1;
  }
  return out;
}

}  // namespace titan::models
