// Loading a model + tokenizer for generation from the published formats:
//   - a llama2.c legacy model.bin + a SentencePiece tokenizer (load_llama2c: HF-named
//     weights with q/k permuted for rotate-half RoPE) -> models::config_from_hf ->
//     Decoder + load_hf_state_dict;
//   - a Hugging Face directory: config.json, model.safetensors (or a sharded index),
//     tokenizer.json.
// (Training checkpoints of `titan train` are loaded by the generate command, which
// reads the run's config.toml.)
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "titan/data/tokenizer.h"
#include "titan/models/common/decoder.h"

namespace titan::infer {

struct LoadedModel {
  std::unique_ptr<models::Decoder> model;
  std::unique_ptr<data::Tokenizer> tokenizer;
  int32_t bos_id = -1;                  // prepended to every prompt when >= 0
  std::vector<int32_t> eos_token_ids;   // end of generation
  std::vector<int32_t> stop_token_ids;  // further stop tokens of the format (llama2.c: BOS)
  std::string description;              // one line: what was loaded
  std::vector<std::string> overrides;   // component overrides applied, resolved (models/common/overrides.h)
};

// llama2.c model.bin + tokenizer (tok512.model). BOS (1) is prepended and also stops
// generation, as llama2.c's run.c does; EOS is 2. Throws titan::Error naming the file.
LoadedModel load_llama2c_model(const std::string& bin_path, const std::string& tokenizer_path);

// HF directory (config.json, model.safetensors[.index.json], tokenizer.json).
// Llama prompts get the tokenizer's BOS; EOS ids come from config.json (and the
// tokenizer). The component overrides a titan export's config.json records
// (models::kHfOverridesKey) are applied (models::apply_generator_overrides; one the
// generator does not run throws naming it). Throws titan::Error naming the file, tensor
// or field.
LoadedModel load_hf_model(const std::string& dir);

// The load step of an inference-only process (`titan generate`, bench/engine_bench):
// model.repack_for_decode() (the layer weights and the LM head in GEMM panels: faster
// decode, the same bits; each matrix exists twice while it is repacked, so the load
// peaks at the weights plus the largest matrix, the LM head), then glibc's mmap
// threshold pinned at 1 MiB (mallopt M_MMAP_THRESHOLD, process-wide): every buffer of
// 1 MiB or more is mmapped and returned to the system when freed. Without the pin,
// freeing the (out, in) weights raises glibc's dynamic threshold to their size, later
// activation buffers come from the heap and stay resident (+76-126 MiB peak at
// qwen3_0.6b B = 64, docs/benchmarks-history.md). Not for a process that also trains (the
// model can no longer be trained, and the trainer relies on the heap reusing its
// activation buffers).
void prepare_for_inference(models::Decoder& model);

}  // namespace titan::infer
