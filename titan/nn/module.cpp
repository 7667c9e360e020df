#include "titan/nn/module.h"

#include <unordered_set>

#include "titan/nn/init.h"

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

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  if (t.requires_grad()) t.requires_grad_(false);
  buffers_.emplace_back(name, t);
  return t;
}

void Module::collect_buffers(const std::string& prefix, NamedTensors& out) const {
  for (auto& [n, t] : buffers_) out.emplace_back(prefix + n, t);
  for (auto& [n, m] : children_) m->collect_buffers(prefix + n + ".", out);
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect_buffers("", out);
  return out;
}

Tensor Module::buffer(const std::string& name) const {
  for (auto& [n, t] : named_buffers())
    if (n == name) return t;
  fail("module has no buffer '{}'", name);
}

std::vector<std::pair<std::string, const Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, const Module*>> out{{"", this}};
  for (auto& [n, m] : children_)
    for (auto& [sub, mm] : static_cast<const Module*>(m)->named_modules())
      out.emplace_back(sub.empty() ? n : n + "." + sub, mm);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  for (auto& [n, m] : static_cast<const Module*>(this)->named_modules())
    out.emplace_back(n, const_cast<Module*>(m));
  return out;
}

void Module::init_weights(const InitContext& ctx) {
  for (auto& [n, m] : children_) m->init_weights(ctx);
}

void Module::zero_grad() {
  for (auto& [n, t] : named_parameters()) t.zero_grad();
}

}  // namespace titan::nn
