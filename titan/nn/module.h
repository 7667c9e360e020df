// nn::Module: a named tree of parameters (HF-style dotted names), as torch.nn.Module.
// Parameters are fp32 leaf tensors that require grad (DESIGN.md §1.4 master weights).
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // All parameters, depth-first in registration order, named "child.sub.name".
  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  int64_t num_parameters() const;
  // Looks up a parameter by full name; throws titan::Error naming it if absent.
  Tensor parameter(const std::string& name) const;
  void zero_grad();

 protected:
  // Registers `t` (made a leaf requiring grad) under `name`; returns it.
  Tensor register_parameter(const std::string& name, Tensor t);
  // Replaces this module's parameter `name` (registered here, not a child's) by `t`,
  // kept as given (requires_grad unchanged): the old tensor is no longer referenced by
  // the module. Throws titan::Error naming `name` if it is not registered here.
  void replace_parameter(const std::string& name, Tensor t);
  // Registers a child module under `name` (its parameters become "name.*").
  template <typename M>
  M* register_module(const std::string& name, std::unique_ptr<M> m) {
    M* raw = m.get();
    children_.emplace_back(name, raw);
    owned_.push_back(std::move(m));
    return raw;
  }

 private:
  void collect(const std::string& prefix, NamedTensors& out) const;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Module*>> children_;
  std::vector<std::unique_ptr<Module>> owned_;
};

}  // namespace titan::nn
