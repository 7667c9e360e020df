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
struct InitContext;  // titan/nn/init.h

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

  // Buffers: non-trained state saved with the module (e.g. a router's aux-loss-free
  // bias), depth-first in registration order like parameters; never require grad and
  // are not returned by named_parameters().
  NamedTensors named_buffers() const;
  // Looks up a buffer by full name; throws titan::Error naming it if absent.
  Tensor buffer(const std::string& name) const;
  // The module tree, depth-first in registration order: ("", this), ("layers.0", ...).
  std::vector<std::pair<std::string, const Module*>> named_modules() const;
  std::vector<std::pair<std::string, Module*>> named_modules();

  // Per-module initialisation (TorchTitan's init_weights): each module type fills its
  // own parameters and buffers through `ctx` (titan/nn/init.h). The default
  // initialises the children in registration order.
  virtual void init_weights(const InitContext& ctx);

 protected:
  // Registers `t` (made a leaf requiring grad) under `name`; returns it.
  Tensor register_parameter(const std::string& name, Tensor t);
  // Replaces this module's parameter `name` (registered here, not a child's) by `t`,
  // kept as given (requires_grad unchanged): the old tensor is no longer referenced by
  // the module. Throws titan::Error naming `name` if it is not registered here.
  void replace_parameter(const std::string& name, Tensor t);
  // Registers a buffer `t` (made not to require grad) under `name`; returns it.
  Tensor register_buffer(const std::string& name, Tensor t);
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
  void collect_buffers(const std::string& prefix, NamedTensors& out) const;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, Module*>> children_;
  std::vector<std::unique_ptr<Module>> owned_;
};

}  // namespace titan::nn
