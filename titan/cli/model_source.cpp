// Loading the model of an inference command (model_source.h).
#include "titan/cli/model_source.h"

#include <fmt/core.h>
#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "titan/autograd/node.h"
#include "titan/checkpoint/distributed_checkpoint.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/checkpoint/train_checkpoint.h"
#include "titan/config/resolve.h"
#include "titan/config/toml_io.h"
#include "titan/core/error.h"
#include "titan/core/fs.h"
#include "titan/models/common/overrides.h"
#include "titan/train/trainer.h"

namespace titan::cli {

namespace {

namespace fs = std::filesystem;

// A `titan train` checkpoint: <dump>/<checkpoint.folder>/step-N/ (either layout, titan
// names), the run's config.toml in <dump>. dir is a step-N folder, the folder of them or
// the job's dump folder (the newest valid one under it or its checkpoint/ is taken).
infer::LoadedModel load_train_checkpoint(const std::string& dir_in) {
  std::string dir = dir_in;
  if (!file_exists(dir + "/MANIFEST.json")) {
    // A folder of step-N checkpoints: the newest valid one. A job's dump folder: its checkpoint/.
    // A step-N folder whose write did not finish (its files are there) falls to the check below.
    auto latest = CheckpointManager::latest(dir);
    if (!latest) latest = CheckpointManager::latest((fs::path(dir) / "checkpoint").string());
    if (latest)
      dir = *latest;
    else
      TITAN_CHECK(file_exists(dir + "/model.safetensors") || file_exists(dir + "/state.json"),
                  "--checkpoint {}: neither a step-N checkpoint nor a folder holding a complete one", dir);
  }
  if (const std::string why = CheckpointManager::invalid_reason(dir); !why.empty())
    fail("--checkpoint {}: incomplete or damaged checkpoint: {}", dir, why);
  const fs::path dump = fs::absolute(fs::path(dir)).lexically_normal().parent_path().parent_path();
  const std::string toml = (dump / "config.toml").string();
  TITAN_CHECK(file_exists(toml), "--checkpoint {}: the run's config.toml is not at {}", dir, toml);
  config::JobConfig job;
  config::apply_toml_file(job, toml);
  infer::LoadedModel out;
  const std::string tp = job.model.tokenizer_path.empty()                         ? std::string("byte")
                         : data::is_builtin_tokenizer(job.model.tokenizer_path) ? job.model.tokenizer_path
                                                                                : config::resolve_data_path(job.model.tokenizer_path);
  out.tokenizer = data::load_tokenizer(tp);
  out.model = std::make_unique<models::Decoder>(train::model_config_from_job(job, out.tokenizer->vocab_size()));
  // The generator computes as the run trained (trainer/generator parity): its dtype and
  // its component overrides.
  out.model->set_compute_bf16(job.model.compute_dtype == config::ComputeDType::bf16);
  const std::vector<std::string> ovr =
      models::apply_generator_overrides(*out.model, job.model.overrides, "--checkpoint " + toml);
  // Either layout (one rank's model.safetensors, or several ranks' shards + index).
  const CheckpointIndex index(dir);
  TensorMap w;
  for (const auto& [name, e] : index.section("model")) w[name] = index.read_full("model", name);
  {
    autograd::NoGradGuard ng;
    for (auto& [name, p] : out.model->named_parameters()) {
      auto it = w.find(name);
      TITAN_CHECK(it != w.end(), "--checkpoint {}: model tensor '{}' missing", dir, name);
      TITAN_CHECK(it->second.shape() == p.shape(), "--checkpoint {}: '{}' has shape {}, the model expects {}", dir,
                  name, shape_str(it->second.shape()), shape_str(p.shape()));
      Tensor dst = p;
      dst.copy_(it->second);
    }
    for (auto& [name, b] : out.model->named_buffers()) {  // e.g. the MoE routers' expert bias
      auto it = w.find(name);
      TITAN_CHECK(it != w.end(), "--checkpoint {}: model buffer '{}' missing", dir, name);
      TITAN_CHECK(it->second.shape() == b.shape(), "--checkpoint {}: '{}' has shape {}, the model expects {}", dir,
                  name, shape_str(it->second.shape()), shape_str(b.shape()));
      Tensor dst = b;
      dst.copy_(it->second);
    }
  }
  if (out.tokenizer->eos_id() >= 0) out.eos_token_ids.push_back(out.tokenizer->eos_id());
  out.description = fmt::format("titan checkpoint {} ({} {} params, config {})", dir, job.model.name,
                                out.model->num_parameters(), toml);
  if (!ovr.empty()) out.description += fmt::format("; model.overrides {}", fmt::join(ovr, ", "));
  out.overrides = ovr;
  return out;
}

}  // namespace

void add_model_source_options(CLI::App& app, ModelSource& src) {
  app.add_option("--checkpoint", src.checkpoint, "titan train checkpoint: a step-N folder or the folder of them");
  app.add_option("--hf", src.hf, "Hugging Face model directory (config.json, model.safetensors, tokenizer.json)");
  app.add_option("--llama2c", src.llama2c, "llama2.c legacy model.bin (needs --tokenizer)");
  app.add_option("--tokenizer", src.tokenizer, "tokenizer for --llama2c (SentencePiece .model)");
  app.add_option("--dtype", src.dtype,
                 "compute dtype: bf16 (bf16 compute and bf16 weight panels, half the weight bytes per "
                 "token) or f32 (default: a --checkpoint's model.compute_dtype, else f32)")
      ->check(CLI::Validator([](std::string& v) { return v.empty() ? std::string("must be f32 or bf16, got ''") : std::string(); },
                             "f32|bf16", "non-empty dtype"));
  app.add_option("--model.overrides", src.overrides,
                 "component overrides component=impl[:glob], applied after those the checkpoint or export "
                 "records (titan train --list-overrides)")
      ->delimiter(',');
}

namespace {
infer::LoadedModel load_as_stored(const ModelSource& a, const std::string& command) {
  const int given = !a.checkpoint.empty() + !a.hf.empty() + !a.llama2c.empty();
  TITAN_CHECK(given == 1, "{}: give exactly one of --checkpoint, --hf, --llama2c (got {})", command, given);
  if (!a.llama2c.empty()) {
    TITAN_CHECK(!a.tokenizer.empty(), "{}: --llama2c needs --tokenizer (e.g. tok512.model)", command);
    return infer::load_llama2c_model(a.llama2c, a.tokenizer);
  }
  if (!a.hf.empty()) return infer::load_hf_model(a.hf);
  return load_train_checkpoint(a.checkpoint);
}
}  // namespace

infer::LoadedModel load_model_source(const ModelSource& a, const std::string& command) {
  TITAN_CHECK(a.dtype.empty() || a.dtype == "f32" || a.dtype == "bf16",
              "{}: --dtype={} is not one of: f32, bf16", command, a.dtype);
  infer::LoadedModel m = load_as_stored(a, command);
  if (!a.overrides.empty()) {
    const std::vector<std::string> ovr =
        models::apply_generator_overrides(*m.model, a.overrides, command + " --model.overrides");
    m.description += fmt::format("; --model.overrides {}{}", fmt::join(ovr, ", "),
                                 a.llama2c.empty() ? ": the logprobs are those of a trainer with these overrides too"
                                                   : "");
    m.overrides.insert(m.overrides.end(), ovr.begin(), ovr.end());
  }
  if (a.dtype.empty()) return m;
  const bool bf16 = a.dtype == "bf16";
  if (bf16 != m.model->compute_bf16()) {
    const bool trained = !a.checkpoint.empty();
    m.model->set_compute_bf16(bf16);
    m.description += bf16 ? fmt::format("; --dtype=bf16: bf16 compute and bf16 weight panels{}", trained ?
                                        ", so the logprobs are not bitwise those of the fp32 trainer" : "")
                          : "; --dtype=f32: the logprobs are not bitwise those of the bf16 trainer";
  } else if (bf16) {
    m.description += "; bf16 compute and bf16 weight panels";
  }
  return m;
}

}  // namespace titan::cli
