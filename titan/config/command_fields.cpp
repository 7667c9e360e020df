#include "titan/config/command_fields.h"

#include <algorithm>

#include "titan/config/field_text.h"
#include "titan/core/error.h"

namespace titan::config {

namespace {

// The model fields that describe the shape and init of a freshly built model.
const std::vector<std::string> kModelShape = {
    "model.name",       "model.flavor",         "model.hf_config",  "model.vocab_size", "model.dim",
    "model.n_layers",   "model.n_heads",        "model.n_kv_heads", "model.head_dim",   "model.ffn_hidden_dim",
    "model.rope_theta", "model.norm_eps",       "model.tie_embeddings", "model.qk_norm", "model.init",
    "model.transforms", "model.applied_transforms"};

bool matches(const std::string& path, const std::string& pattern) {
  // "section." and "section.prefix_" name every field that starts with them.
  if (!pattern.empty() && (pattern.back() == '.' || pattern.back() == '_'))
    return path.compare(0, pattern.size(), pattern) == 0;
  return path == pattern;
}

std::string why(const std::string& pattern, std::string_view command) {
  if (pattern == "metrics.save_tb_folder") return "metrics.enable_tensorboard is false";
  if (pattern == "parallelism.enable_sequence_parallel" && command == "train")
    return "sequence parallelism applies with parallelism.tensor_parallel_degree > 1 only";
  if (pattern.rfind("parallelism.pipeline_parallel_", 0) == 0) return "the RL trainer runs no pipeline stages";
  if (pattern == "parallelism.enable_sequence_parallel")
    return "the RL trainer's tensor parallelism runs without sequence parallelism";
  if (command == "train") {
    if (pattern == "generator." || pattern == "rl.") return "it is read by titan rl (titan generate has its own options)";
  }
  if (pattern == "optimizer.muon_") return "Muon settings need optimizer.name=muon";
  if (pattern == "optimizer.no_decay_biases") return "the model families (llama3, qwen3) have no bias parameters";
  if (pattern == "optimizer.no_decay_norms" || pattern == "optimizer.no_decay_embeddings")
    return "optimizer.weight_decay is 0";
  if (pattern == "lr_scheduler.decay_ratio") return "it applies to lr_scheduler.decay_type=wsd only";
  if (pattern == "lr_scheduler.min_lr") return "lr_scheduler.decay_type=constant never decays";
  if (pattern == "checkpoint.initial_load_path") return "the initial policy of titan rl is rl.init_from";
  if (pattern.rfind("checkpoint.", 0) == 0 && pattern != "checkpoint.export_hf") return "checkpoint.enable is false";
  if (pattern.rfind("validation.", 0) == 0 && command == "train") return "validation.enabled is false";
  if (pattern == "training.task" || pattern == "training.task_config") return "it applies to training.dataset=rl_task_sft only";
  if (pattern == "training.dataset_path") return "training.dataset names a built-in source that reads no file";
  if (pattern == "rl.max_sampling_rounds") return "it applies to rl.dynamic_sampling=true only";
  if (pattern == "rl.ref_model") return "the reference model is used only when rl.kl_coef > 0";
  if (pattern == "rl.overlong_penalty_factor") return "the overlong penalty is off (rl.overlong_buffer_len=0)";
  if (pattern == "rl.val_samples") return "rl.val_freq=0 runs no validation";
  if (pattern.rfind("model.", 0) == 0 && command == "train") return "model.hf_config gives the model shape";
  if (pattern.rfind("model.", 0) == 0) return "with rl.init_from set the model comes from that export";
  if (pattern == "training.seq_len")
    return "with rl.init_from set the context is the export's; rollout lengths are rl.max_total_tokens and "
           "generator.max_tokens";
  if (pattern == "validation.") return "RL validation is rl.val_freq and rl.val_samples";
  if (pattern == "metrics.peak_flops") return "titan rl reports no MFU";
  if (pattern == "checkpoint.export_hf") return "titan rl writes training checkpoints only";
  if (pattern == "training.host_cache_mb") return "the RL trainer keeps no host block cache; generator.host_cache_bytes is the engine's";
  return "titan rl reads its samples from rl.env and packs rl.microbatch_tokens per microbatch";
}

// Fields unused by both commands: those that only matter when another field turns
// them on, and optimizer.no_decay_biases.
void add_common(const JobConfig& c, std::vector<std::string>& out) {
  if (!c.metrics.enable_tensorboard) out.push_back("metrics.save_tb_folder");
  out.push_back("optimizer.no_decay_biases");  // no family has biases: nothing to select
  if (c.optimizer.weight_decay == 0.0) {
    out.push_back("optimizer.no_decay_norms");
    out.push_back("optimizer.no_decay_embeddings");
  }
  if (c.optimizer.name != OptimizerName::muon) out.push_back("optimizer.muon_");
  if (c.lr_scheduler.decay_type != DecayType::wsd) out.push_back("lr_scheduler.decay_ratio");
  if (c.lr_scheduler.decay_type == DecayType::constant) out.push_back("lr_scheduler.min_lr");
  if (!c.checkpoint.enable)
    for (const char* f : {"checkpoint.folder", "checkpoint.interval", "checkpoint.keep_latest_k",
                          "checkpoint.resume", "checkpoint.async_mode"})
      out.push_back(f);
}
}  // namespace

std::vector<std::string> unused_fields(const JobConfig& c, std::string_view command) {
  std::vector<std::string> out;
  if (command == "train") {
    out = {"generator.", "rl."};
    add_common(c, out);
    if (!c.validation.enabled)
      for (const char* f : {"validation.freq", "validation.steps", "validation.split_fraction"}) out.push_back(f);
    if (c.training.dataset != "rl_task_sft") {
      out.push_back("training.task");
      out.push_back("training.task_config");
    } else {
      out.push_back("training.dataset_path");
    }
    if (!c.model.hf_config.empty())
      for (const std::string& f : kModelShape)
        if (f != "model.hf_config") out.push_back(f);
    if (c.parallelism.tensor_parallel_degree == 1) out.push_back("parallelism.enable_sequence_parallel");
    return out;
  }
  if (command != "rl") return out;
  out = {"training.dataset",          "training.dataset_path",
         "training.local_batch_size", "training.global_batch_size",
         "training.activation_checkpoint", "training.host_cache_mb",
         "training.task",             "training.task_config",
         "validation.",               "checkpoint.export_hf",     "checkpoint.initial_load_path",
         "metrics.peak_flops",        "parallelism.enable_sequence_parallel",
         "parallelism.pipeline_parallel_schedule", "parallelism.pipeline_parallel_microbatch_size",
         "parallelism.pipeline_parallel_layers_per_stage"};
  add_common(c, out);
  if (!c.rl.dynamic_sampling) out.push_back("rl.max_sampling_rounds");
  if (c.rl.kl_coef == 0.0) out.push_back("rl.ref_model");
  if (c.rl.overlong_buffer_len == 0) out.push_back("rl.overlong_penalty_factor");
  if (c.rl.val_freq == 0) out.push_back("rl.val_samples");
  if (!c.rl.init_from.empty()) {
    out.push_back("training.seq_len");
    out.insert(out.end(), kModelShape.begin(), kModelShape.end());
  }
  return out;
}

void refuse_unused_fields(const JobConfig& c, const JobConfig& recipe, std::string_view command,
                          const std::vector<std::string>& overridden) {
  const std::vector<std::string> unused = unused_fields(c, command);
  if (unused.empty()) return;
  JobConfig a = c, b = recipe, d;
  const FieldTable ta = reflect(a), tb = reflect(b), td = reflect(d);
  for (size_t i = 0; i < ta.fields.size(); ++i) {
    const FieldRef& f = ta.fields[i];
    for (const std::string& p : unused) {
      if (!matches(f.path, p)) continue;
      // The recipe's value or the default is not a setting: a config printed by
      // --print-config (of this or another recipe) lists every field.
      const std::string value = format_toml_value(f);
      const bool given = std::find(overridden.begin(), overridden.end(), f.path) != overridden.end();
      if (given || (value != format_toml_value(tb.fields[i]) && value != format_toml_value(td.fields[i])))
        fail("{}={} is not used by titan {} ({}); remove it", f.path, value, command, why(p, command));
    }
  }
}

}  // namespace titan::config
