#include "titan/optim/param_groups.h"

namespace titan::optim {

std::vector<ParamRef> to_param_refs(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<ParamRef> out;
  out.reserve(named.size());
  for (const auto& [name, t] : named) out.push_back({name, t});
  return out;
}

std::string_view param_kind_name(ParamKind k) {
  switch (k) {
    case ParamKind::norm: return "norm";
    case ParamKind::bias: return "bias";
    case ParamKind::embedding: return "embedding";
    case ParamKind::output: return "output";
    case ParamKind::matrix: return "matrix";
    case ParamKind::other: return "other";
  }
  return "?";
}

ParamKind classify_param(std::string_view name, const Shape& shape) {
  const size_t dot = name.rfind('.');
  const std::string_view last = dot == std::string_view::npos ? name : name.substr(dot + 1);
  std::string_view module;
  if (dot != std::string_view::npos) {
    const std::string_view head = name.substr(0, dot);
    const size_t d2 = head.rfind('.');
    module = d2 == std::string_view::npos ? head : head.substr(d2 + 1);
  }
  if (last == "bias") return ParamKind::bias;
  if (module.find("norm") != std::string_view::npos || module.starts_with("ln"))
    return ParamKind::norm;
  if (module.find("embed") != std::string_view::npos || module == "wte" || module == "wpe")
    return ParamKind::embedding;
  if (module == "lm_head" || module == "output") return ParamKind::output;
  if (shape.size() == 2) return ParamKind::matrix;
  return ParamKind::other;
}

bool gets_weight_decay(ParamKind kind, int64_t dim, const WeightDecayRules& rules) {
  switch (kind) {
    case ParamKind::norm: return rules.decay_norms;
    case ParamKind::bias: return rules.decay_biases;
    case ParamKind::embedding: return rules.decay_embeddings;
    case ParamKind::output: return rules.decay_output;
    case ParamKind::matrix: return true;
    case ParamKind::other: return dim >= 2;
  }
  return false;
}

}  // namespace titan::optim
