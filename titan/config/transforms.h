// Named model-config transforms (TorchTitan's model converters): functions that
// rewrite a JobConfig, applied in the order listed in model.transforms after the
// recipe, TOML file and command-line overrides (resolve_config). Each applied
// name is appended to model.applied_transforms and model.transforms is emptied,
// so a printed config reads back to the same config without re-running them.
//
// Built-ins (table in transforms.cpp): tie_embeddings, untie_embeddings,
// no_qk_norm.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "titan/config/job_config.h"

namespace titan::config {

struct Transform {
  std::string name;
  std::string doc;  // one line
  std::function<void(JobConfig&)> apply;
};

// All transforms, sorted by name.
std::vector<Transform> list_transforms();

// Adds a transform; throws titan::Error if the name is taken or empty.
void register_transform(Transform t);

// Runs the named transform on `c`. Throws titan::Error
// "unknown model transform 'x' (did you mean 'y'?; available: a, b)".
void apply_transform(JobConfig& c, const std::string& name);

// Applies c.model.transforms in order, moves their names to
// c.model.applied_transforms and clears c.model.transforms.
void apply_transforms(JobConfig& c);

}  // namespace titan::config
