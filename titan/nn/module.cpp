#include "titan/nn/module.h"

#include <unordered_set>

namespace titan::nn {

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  TITAN_CHECK(t.dtype() == DType::f32, "register_parameter '{}': parameters are f32, got {}", name,
              dtype_name(t.dtype()));
  if (!t.requires_grad()) t.requires_grad_(true);
  params_.emplace_back(name, t);
  return t;
}

void Module::replace_parameter(const std::string& name, Tensor t) {
  for (auto& [n, old] : params_)
    if (n == name) {
      old = std::move(t);
      return;
    }
  fail("replace_parameter: no parameter '{}' in this module", name);
}

void Module::collect(const std::string& prefix, NamedTensors& out) const {
  for (auto& [n, t] : params_) out.emplace_back(prefix + n, t);
  for (auto& [n, m] : children_) m->collect(prefix + n + ".", out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors all, uniq;
  collect("", all);
  std::unordered_set<const void*> seen;
  for (auto& p : all)
    if (seen.insert(p.second.unsafe_impl()).second) uniq.push_back(p);
  return uniq;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [_, t] : named_parameters()) n += t.numel();
  return n;
}

Tensor Module::parameter(const std::string& name) const {
  for (auto& [n, t] : named_parameters())
    if (n == name) return t;
  fail("module has no parameter '{}'", name);
}

void Module::zero_grad() {
  for (auto& [n, t] : named_parameters()) t.zero_grad();
}

}  // namespace titan::nn
