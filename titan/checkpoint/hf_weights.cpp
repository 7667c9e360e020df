#include "titan/checkpoint/hf_weights.h"

#include <vector>

#include "titan/core/error.h"

namespace titan {

void check_hf_weights_match_config(const HFConfig& c, const SafetensorsCheckpoint& weights,
                                   const std::string& source) {
  const std::string where = "config.json " + source;
  // Layer indices present: "model.layers.<i>.<rest>".
  const std::string prefix = "model.layers.";
  std::vector<bool> have;
  int64_t n_present = 0;
  for (const std::string& name : weights.names()) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    size_t p = prefix.size();
    int64_t i = 0;
    bool digits = false;
    while (p < name.size() && name[p] >= '0' && name[p] <= '9' && i < (int64_t{1} << 40)) {
      i = i * 10 + (name[p++] - '0');
      digits = true;
    }
    if (!digits || p >= name.size() || name[p] != '.' || i >= c.num_hidden_layers) continue;
    if (static_cast<int64_t>(have.size()) <= i) have.resize(static_cast<size_t>(i) + 1, false);
    if (!have[static_cast<size_t>(i)]) ++n_present;
    have[static_cast<size_t>(i)] = true;
  }
  if (n_present < c.num_hidden_layers) {
    int64_t missing = 0;
    while (missing < static_cast<int64_t>(have.size()) && have[static_cast<size_t>(missing)]) ++missing;
    fail("{}: num_hidden_layers is {} but the weights hold {} layer(s): no tensor 'model.layers.{}.*'", where,
         c.num_hidden_layers, n_present, missing);
  }

  auto expect_shape = [&](const std::string& name, const Shape& want, const std::string& fields) {
    const SafetensorsEntry& e = weights.entry(name);
    if (e.shape != want)
      fail("{}: {} give {} for '{}', but the weights ({}) hold {}", where, fields, shape_str(want), name,
           weights.shard_of(name), shape_str(e.shape));
  };
  const char* emb = weights.contains("model.embed_tokens.weight") ? "model.embed_tokens.weight"
                    : weights.contains("lm_head.weight")            ? "lm_head.weight"
                                                                    : nullptr;
  if (!emb) fail("{}: the weights have neither 'model.embed_tokens.weight' nor 'lm_head.weight'", where);
  expect_shape(emb, {c.vocab_size, c.hidden_size}, "vocab_size x hidden_size");
  const std::string l0 = "model.layers.0.";
  if (weights.contains(l0 + "self_attn.q_proj.weight"))
    expect_shape(l0 + "self_attn.q_proj.weight", {c.num_attention_heads * c.head_dim, c.hidden_size},
                 "num_attention_heads x head_dim, hidden_size");
  if (weights.contains(l0 + "self_attn.k_proj.weight"))
    expect_shape(l0 + "self_attn.k_proj.weight", {c.num_key_value_heads * c.head_dim, c.hidden_size},
                 "num_key_value_heads x head_dim, hidden_size");
  if (weights.contains(l0 + "mlp.gate_proj.weight"))
    expect_shape(l0 + "mlp.gate_proj.weight", {c.intermediate_size, c.hidden_size},
                 "intermediate_size, hidden_size");
}

}  // namespace titan
