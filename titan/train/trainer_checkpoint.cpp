// The trainer's checkpoints and HF export: distributed save (each rank its pieces, rank 0
// the index), resume on any layout, and the gathered HF export written by world rank 0.
#include <fmt/core.h>

#include <filesystem>
#include <optional>
#include <set>

#include "titan/checkpoint/hf_config.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/checkpoint/distributed_checkpoint.h"
#include "titan/checkpoint/train_checkpoint.h"
#include "titan/config/resolve.h"
#include "titan/core/fs.h"
#include "titan/distributed/expert_parallel.h"
#include "titan/distributed/fsdp.h"
#include "titan/distributed/pipeline.h"
#include "titan/distributed/tensor_parallel.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/models/common/overrides.h"
#include "titan/models/family.h"
#include "titan/train/checkpoint_pieces.h"
#include "titan/train/metrics.h"
#include "titan/train/trainer.h"
#include "titan/train/trainer_ckpt.h"

namespace titan::train {

namespace fs = std::filesystem;

void Trainer::save_checkpoint(int64_t step, double& blocking_ms) {
  if (!ckpt_->mgr)
    ckpt_->mgr = std::make_unique<DistributedCheckpointManager>(
        ckpt_->folder, job_.checkpoint.keep_latest_k, job_.checkpoint.async_mode == config::AsyncMode::async,
        mesh_->world(), mesh_.get());
  TrainState st;
  st.step = step;
  st.extra["loader"] = doc_loader_ ? doc_loader_->state() : loader_->state().to_json();
  st.extra["seed"] = job_.training.seed;
  st.extra["kernel_isa"] = std::string(kernels::cpu::isa_name(kernels::cpu::cpu_isa()));
  if (!ckpt_->row.is_null()) st.extra["metrics_row"] = ckpt_->row;
  const std::vector<ShardedTensor> params =
      checkpoint_pieces(*model_, *mesh_, fsdp_.get(), tp_.get(), ep_.get(), pipeline_.get());
  blocking_ms = ckpt_->mgr->save(params, sharded_optimizer_state(opt_->state_dict(), params), st);
}

bool Trainer::try_resume() {
  if (!job_.checkpoint.enable || !job_.checkpoint.resume) return false;
  // Every rank agrees on the newest published checkpoint (in either layout, written by
  // any number of ranks) and reads the boxes of its own pieces from it. Directories of
  // writes that never finished (a kill during a save) are not checkpoints: rank 0
  // removes them so they cannot be mistaken for one later.
  const ResumePoint rp = find_resume_checkpoint(ckpt_->folder, mesh_->world());
  for (const std::string& d : rp.removed) fmt::print("removed incomplete checkpoint {}\n", d);
  if (!rp.dir) return false;
  const std::optional<std::string> latest = rp.dir;
  LoadedCheckpoint c;
  collective_check(mesh_->world(), [&] {  // a bad checkpoint is an error on every rank
    c.state = read_checkpoint_state(*latest);
    const CheckpointIndex index(*latest);
    const std::vector<ShardedTensor> params =
        checkpoint_pieces(*model_, *mesh_, fsdp_.get(), tp_.get(), ep_.get(), pipeline_.get());
    // Under PP the other stages' tensors are the other pp ranks' to load.
    const std::set<std::string> elsewhere = checkpoint_names_elsewhere(*model_, pipeline_.get());
    load_sharded(index, "model", params, elsewhere);
    opt_->load_state_dict(load_sharded_optimizer(index, params, elsewhere));
    if (doc_loader_)
      doc_loader_->load_state(c.state.extra.at("loader"));
    else
      loader_->load_state(data::LoaderState::from_json(c.state.extra.at("loader")));
  });
  start_step_ = c.state.step;
  if (rank0_) {  // rank 0 owns metrics.jsonl
    trim_metrics(dump_ + "/metrics.jsonl", start_step_);
    if (job_.metrics.jsonl && c.state.extra.contains("metrics_row"))
      restore_metrics_row(dump_ + "/metrics.jsonl", c.state.extra.at("metrics_row"), "loss");
  }
  if (rank0_) fmt::print("resumed from {} (step {})\n", *latest, start_step_);
  return true;
}

void Trainer::export_hf() {
  if (pipeline_) {
    // Every stage's parameters reach world rank 0, which writes them. With tp, each tp
    // coordinate's pp rank 0 gathers its slice, then the tp group of world rank 0 joins
    // the slices (a collective over that group only).
    pipeline_->gather_parameters(fsdp_.get());
    bool first = true;
    for (distributed::MeshDim d : {distributed::MeshDim::pp, distributed::MeshDim::dp_replicate,
                                   distributed::MeshDim::dp_shard, distributed::MeshDim::cp})
      first = first && mesh_->coord(d) == 0;
    if (tp_ && first) {
      std::unique_ptr<models::Decoder> full = tp_->gather_full_model();
      if (rank0_) write_hf_export(*full);
    } else if (!tp_ && rank0_) {
      write_hf_export(*model_);
    }
  } else {
    // Full tensors are gathered on every rank (collectives); rank 0 writes them.
    if (fsdp_) fsdp_->unshard_all();
    if (ep_) ep_->unshard_all();
    if (tp_) {
      std::unique_ptr<models::Decoder> full = tp_->gather_full_model();
      if (rank0_) write_hf_export(*full);
    } else if (rank0_) {
      write_hf_export(*model_);
    }
  }
  if (fsdp_) fsdp_->reshard_all();
  if (ep_) ep_->reshard_all();
}

void Trainer::write_hf_export(const models::Decoder& model) {
  const std::string dir = dump_ + "/hf";
  create_output_dir(dir, "checkpoint.export_hf (<job.dump_folder>/hf)");
  save_safetensors(dir + "/model.safetensors", models::hf_state_dict(model));
  HFConfig hf = models::config_to_hf(model.config());
  // The overrides the model ran with, which a loader of the export applies again.
  if (!job_.model.overrides.empty()) hf.extra[models::kHfOverridesKey] = job_.model.overrides;
  save_hf_config(dir + "/config.json", hf);
  const std::string tp = job_.model.tokenizer_path;
  if (tp.empty() || data::is_builtin_tokenizer(tp)) {
    // A built-in tokenizer has no file: name it so load_tokenizer(dir) finds it.
    write_file_atomic(dir + "/" + data::kBuiltinTokenizerFile, std::string(tok_->kind()) + "\n");
  } else {
    std::string src = config::resolve_data_path(tp);
    if (fs::is_directory(src)) src += "/tokenizer.json";
    fs::copy_file(src, dir + "/" + fs::path(src).filename().string(), fs::copy_options::overwrite_existing);
  }
}

}  // namespace titan::train
