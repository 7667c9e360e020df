#include "titan/config/transforms.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>

#include "titan/config/field_text.h"
#include "titan/core/error.h"

namespace titan::config {

namespace {

struct Registry {
  std::mutex mu;
  std::vector<Transform> transforms{
      {"tie_embeddings", "lm_head shares the token-embedding matrix (model.tie_embeddings = true)",
       [](JobConfig& c) { c.model.tie_embeddings = true; }},
      {"untie_embeddings", "separate lm_head matrix (model.tie_embeddings = false)",
       [](JobConfig& c) { c.model.tie_embeddings = false; }},
      {"no_qk_norm", "drop the per-head q/k RMSNorm (model.qk_norm = false), e.g. Qwen3 -> Llama-style attention",
       [](JobConfig& c) { c.model.qk_norm = false; }},
  };
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

std::vector<Transform> list_transforms() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  std::vector<Transform> out = r.transforms;
  std::sort(out.begin(), out.end(), [](const Transform& a, const Transform& b) { return a.name < b.name; });
  return out;
}

void register_transform(Transform t) {
  TITAN_CHECK(!t.name.empty() && t.apply, "register_transform: transform needs a name and a function");
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  for (const auto& x : r.transforms)
    TITAN_CHECK(x.name != t.name, "register_transform: transform '{}' is already registered", t.name);
  r.transforms.push_back(std::move(t));
}

void apply_transform(JobConfig& c, const std::string& name) {
  std::vector<Transform> all = list_transforms();
  for (const auto& t : all)
    if (t.name == name) return t.apply(c);
  std::vector<std::string> names;
  for (const auto& t : all) names.push_back(t.name);
  std::string near = nearest_key(names, name);
  fail("unknown model transform '{}' ({}available: {})", name,
       near.empty() ? "" : fmt::format("did you mean '{}'?; ", near), fmt::join(names, ", "));
}

void apply_transforms(JobConfig& c) {
  // Names recorded by an earlier resolve (a saved config.toml) must be transforms that exist.
  const std::vector<Transform> all = list_transforms();
  for (const auto& n : c.model.applied_transforms)
    TITAN_CHECK(std::any_of(all.begin(), all.end(), [&](const Transform& t) { return t.name == n; }),
                "model.applied_transforms: '{}' is not a model transform (titan train --list-transforms)", n);
  std::vector<std::string> names = std::move(c.model.transforms);
  c.model.transforms.clear();
  for (const auto& n : names) {
    apply_transform(c, n);
    c.model.applied_transforms.push_back(n);
  }
}

}  // namespace titan::config
