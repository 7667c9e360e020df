// Where an inference command (`titan generate`, `titan serve`) takes its model from:
// exactly one of --checkpoint (a `titan train` checkpoint: step-N/model.safetensors and
// the run's config.toml), --hf (a Hugging Face directory) or --llama2c (+ --tokenizer).
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "titan/infer/model_loader.h"

namespace titan::cli {

struct ModelSource {
  std::string checkpoint, hf, llama2c, tokenizer;
  std::string dtype;  // --dtype: "", "f32" or "bf16" (Decoder::set_compute_bf16)
};

// Adds --checkpoint, --hf, --llama2c, --tokenizer and --dtype to app.
void add_model_source_options(CLI::App& app, ModelSource& src);

// Loads the model and its tokenizer. command names the caller in messages. Throws
// titan::Error when not exactly one source is given, and naming the file, tensor or
// field that is missing or malformed. A --checkpoint model computes in its run's
// model.compute_dtype; --dtype overrides it (the description then says that parity
// with the trainer is off); --dtype=bf16 on a family bf16 compute does not cover
// throws (Decoder::set_compute_bf16).
infer::LoadedModel load_model_source(const ModelSource& src, const std::string& command);

}  // namespace titan::cli
