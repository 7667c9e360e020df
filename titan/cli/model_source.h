// Where an inference command (`titan generate`, `titan serve`) takes its model from:
// exactly one of --checkpoint (a `titan train` checkpoint: step-N/model.safetensors and
// the run's config.toml), --hf (a Hugging Face directory) or --llama2c (+ --tokenizer).
// The component overrides the source records (a run's model.overrides, an export's
// config.json titan_model_overrides) are applied to the model, as the trainer applied
// them, and --model.overrides adds more (models/common/overrides.h).
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "titan/infer/model_loader.h"

namespace titan::cli {

struct ModelSource {
  std::string checkpoint, hf, llama2c, tokenizer;
  std::string dtype;  // --dtype: "", "f32" or "bf16" (Decoder::set_compute_bf16)
  std::vector<std::string> overrides;  // --model.overrides: component=impl[:glob], beside the recorded ones
};

// Adds --checkpoint, --hf, --llama2c, --tokenizer, --dtype and --model.overrides to app.
void add_model_source_options(CLI::App& app, ModelSource& src);

// Loads the model and its tokenizer. command names the caller in messages. Throws
// titan::Error when not exactly one source is given, and naming the file, tensor or
// field that is missing or malformed. A --checkpoint model computes in its run's
// model.compute_dtype; --dtype overrides it (the description then says that parity
// with the trainer is off); --dtype=bf16 on a family bf16 compute does not cover
// throws (Decoder::set_compute_bf16). Overrides (recorded, then --model.overrides) go
// through models::apply_generator_overrides: one the generator does not run (e.g.
// attention=reference) throws naming it, as do the errors of apply_overrides; extra
// --model.overrides make the description say that parity with the trainer is off.
infer::LoadedModel load_model_source(const ModelSource& src, const std::string& command);

}  // namespace titan::cli
