// Component overrides (TorchTitan's per-module implementation swaps, survey §2.4): a
// named override replaces the implementation of one component of the model, for every
// module it applies to or for those whose path matches a glob. The parameters and
// their checkpoint keys never change; only the code a module runs does.
//
// Spelling (config key model.overrides, a list): "component=impl" or
// "component=impl:glob", glob over module paths with * and ? (fnmatch, no special
// meaning for '.'), e.g.
//     attention=reference                 every gqa and mla attention layer
//     rope=composed:layers.0.attention    one layer
//     swiglu=composed:layers.[13].*       the dense FFNs / shared experts of layers 1 and 3
// `titan train --list-overrides` prints the table (list_overrides()).
//
// Errors (titan::Error, one line naming the entry): an unknown component or impl, a bad
// spelling, a glob matching no module the component applies to, and two entries
// claiming the same module for the same component (whatever their impls).
//
// Trainer and generator run the same modules (DESIGN.md "one model"), so a model built
// for inference (titan generate / serve, the RL generator) applies the overrides its
// run recorded, through apply_generator_overrides: an implementation the generator's
// paged path does not run (OverrideInfo::generator false) is refused there, since the
// generator would silently compute something other than what the trainer did.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "titan/nn/module.h"

namespace titan {
struct HFConfig;
}

namespace titan::models {

struct OverrideInfo {
  std::string component, impl;  // e.g. "attention", "reference"
  std::string applies_to;       // the module kind, e.g. "gqa attention (layers.L.attention)"
  std::string doc;              // one line
  bool is_default = false;      // the implementation a module runs without overrides
  bool generator = true;        // the generator's paged path runs it too (else: trainer path only)
};

// The config.json key under which a titan HF export records the run's resolved
// overrides (a list of "component=impl:glob"; transformers keeps it as an unused
// attribute).
inline constexpr const char* kHfOverridesKey = "titan_model_overrides";

// The overrides a config.json records under kHfOverridesKey (empty when absent). Throws
// titan::Error naming `source` when the value is not a list of strings.
std::vector<std::string> hf_recorded_overrides(const HFConfig& hf, const std::string& source);

// Every (component, impl) pair, sorted by component then impl.
std::vector<OverrideInfo> list_overrides();

// Applies the entries to the modules of `root` (a Decoder). Returns the entries in
// their resolved form "component=impl:glob" (glob "*" when none was given), in order.
std::vector<std::string> apply_overrides(nn::Module& root, const std::vector<std::string>& entries);

// apply_overrides for a model that generates (paged path). Throws titan::Error, one line
// naming the entry and `source` (what recorded it, e.g. "--checkpoint run/config.toml"),
// for an implementation the generator does not run (OverrideInfo::generator false),
// before touching the model; otherwise as apply_overrides.
std::vector<std::string> apply_generator_overrides(nn::Module& root, const std::vector<std::string>& entries,
                                                   const std::string& source);

// How many times a module has run the non-default implementation `impl` of
// `component` in this process (every forward through it counts one): observable proof
// that an override changed the code path.
int64_t override_calls(const std::string& component, const std::string& impl);
// One line for resolved entries: "swiglu=composed:* ran 34 forwards, rope=fused:* (the
// default)" (override_calls of each non-default implementation, process-wide).
std::string override_calls_summary(const std::vector<std::string>& resolved);
// Counts one call (the modules' forwards call it on their overridden paths).
void count_override_call(const char* component, const char* impl);

}  // namespace titan::models
