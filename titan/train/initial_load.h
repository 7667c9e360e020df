// checkpoint.initial_load_path: a training run that starts from the weights of a
// Hugging Face export (a previous run's <dump>/hf, or any HF folder of a supported
// family) instead of a random init: fine-tuning, or a later stage of a curriculum.
// TorchTitan's checkpoint.initial_load_path with initial_load_in_hf and
// initial_load_model_only: the weights only, no optimizer state or step; a checkpoint
// found in checkpoint.folder is resumed instead (Trainer, after this load).
#pragma once
#include <string>

#include "titan/models/common/decoder.h"

namespace titan::train {

// Copies every parameter (and stored buffer) of `model`, a freshly built full
// (1-rank) model, from the export in folder `dir` (config.json + model.safetensors,
// relative paths resolved as data paths). Throws titan::Error naming
// checkpoint.initial_load_path when the folder or its config.json is missing, when
// the export's config differs from `model`'s in a shape or numerics field (the field,
// both values and "set model.hf_config=<dir>/config.json" in the message), or when a
// tensor is missing or has another shape. Bits are copied unchanged (f32 exports; a
// bf16 or f16 export is widened exactly).
void load_initial_weights(models::Decoder& model, const std::string& dir);

}  // namespace titan::train
