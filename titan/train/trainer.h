// The pretraining trainer (TorchTitan's train loop, survey §3): config → model →
// data → optimizer/schedule → [microbatches: forward, token-mean CE, backward] →
// clip → optimizer step → metrics → validation → checkpoint. Deterministic: same
// config ⇒ bitwise identical losses and weights, including across a checkpoint
// resume (DESIGN.md §1.3).
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "titan/config/job_config.h"
#include "titan/core/host_alloc.h"
#include "titan/data/loader.h"
#include "titan/data/masked_documents.h"
#include "titan/data/tokenizer.h"
#include "titan/distributed/device_mesh.h"
#include "titan/models/common/decoder.h"
#include "titan/optim/lr_scheduler.h"
#include "titan/optim/optimizer.h"

namespace titan::distributed {
class FullyShard;
class ExpertParallel;
class TensorParallel;
class ContextParallel;
class Pipeline;
}

namespace titan::train {

// The decoder shape a job asks for: model.hf_config when set, else the model.*
// shape fields (vocab_size 0 = the tokenizer's). Throws titan::Error on bad values.
models::TransformerConfig model_config_from_job(const config::JobConfig& job, int64_t tokenizer_vocab);

// The MFU denominator in FLOP/s: `configured` (metrics.peak_flops) when > 0; when 0, the
// measured fp32 peak per core of the ISA the kernels run (config::kPeakFlopsPerCoreAvx2
// or ...Avx512) times num_threads().
double mfu_peak_flops(double configured);

// The non-finite guard of one optimizer step (1-based `step`): true when loss and
// grad_norm are finite (make the update); false when not and `skip`
// (training.skip_nonfinite_steps: the caller makes no update, a line is printed);
// otherwise throws titan::Error "step N: loss nan / grad_norm nan is not finite ...".
bool nonfinite_step_guard(int64_t step, double loss, double grad_norm, bool skip);

// optimizer / lr_scheduler sections → optim configs.
optim::OptimizerConfig optimizer_config_from_job(const config::JobConfig& job);
optim::LRSchedulerConfig lr_config_from_job(const config::JobConfig& job);

struct TrainResult {
  int64_t steps_done = 0;
  double final_loss = 0, final_val_loss = -1;
  bool interrupted = false;  // stopped early by SIGINT/SIGTERM (after saving a checkpoint)
  int signal = 0;            // the signal that stopped it
  std::string dump_folder;
};

class Trainer {
 public:
  explicit Trainer(const config::JobConfig& job);
  ~Trainer();
  // Runs (or resumes) the job. Returns after training.steps, or early after saving a
  // checkpoint when SIGINT/SIGTERM arrived.
  TrainResult train();
  // Mean validation loss over validation.steps fixed batches (token-weighted).
  double evaluate();
  // Greedy/temperature sample of n tokens after `prompt` (full recompute, no cache).
  std::string sample(const std::string& prompt, int64_t n, double temperature, uint64_t seed);

  models::Decoder& model() { return *model_; }
  const config::JobConfig& job() const { return job_; }

 private:
  void build();
  // training.dataset names a registered document source (document_sources.h): builds
  // doc_loader_ / doc_val_loader_ and returns true; false for the stream datasets.
  bool build_document_loaders();
  // `attended` = Σ over the step's documents (cu_seqlens segments, all ranks) of
  // length²: the key count behind MFU's attention term (tokens attended per token =
  // attended / tokens, seq_len when every sample is one document).
  double train_step(int64_t step, double& grad_norm, int64_t& tokens, double& attended);
  void save_checkpoint(int64_t step, double& blocking_ms);
  bool try_resume();
  void export_hf();
  void write_hf_export(const models::Decoder& model);  // export_hf's files, from a full model's parameters
  // Adds checkpoint_write_ms / checkpoint_step to row when a write finished since
  // last_logged (its step); returns whether it did.
  bool log_checkpoint_write(nlohmann::json& row, int64_t& last_logged) const;

  config::JobConfig job_;
  std::unique_ptr<distributed::DeviceMesh> mesh_;
  // FSDP/HSDP when the data-parallel degree is > 1 (titan/distributed/fsdp.h): the
  // optimizer then holds the shards, and rank 0 alone prints and writes files.
  std::unique_ptr<distributed::FullyShard> fsdp_;
  std::unique_ptr<distributed::ExpertParallel> ep_;  // expert_parallel_degree > 1
  // Tensor (+ sequence) parallelism when tp > 1 (titan/distributed/tensor_parallel.h):
  // model_ then holds this rank's pieces.
  std::unique_ptr<distributed::TensorParallel> tp_;
  // Context parallelism (cp > 1): each batch's tokens split over the cp ranks.
  std::unique_ptr<distributed::ContextParallel> cp_;
  // Pipeline stages when pipeline_parallel_degree > 1 (titan/distributed/pipeline.h):
  // this rank holds and trains only its stages; the loaders then draw microbatches of
  // pipeline_parallel_microbatch_size rows.
  std::unique_ptr<distributed::Pipeline> pipeline_;
  int64_t loader_rows_ = 0;
  bool rank0_ = true;
  std::optional<ScopedHostCacheLimit> host_cache_;  // training.host_cache_mb while alive
  std::string dump_;
  std::unique_ptr<data::Tokenizer> tok_;
  std::unique_ptr<models::Decoder> model_;
  std::unique_ptr<optim::Optimizer> opt_;
  std::unique_ptr<optim::LRScheduler> sched_;
  std::unique_ptr<data::DataLoader> loader_;
  std::unique_ptr<data::ValidationLoader> val_loader_;
  std::unique_ptr<data::MaskedDocumentLoader> doc_loader_, doc_val_loader_;  // document-source datasets
  struct Ckpt;
  std::unique_ptr<Ckpt> ckpt_;
  int64_t start_step_ = 0;
};

// `titan train` entry point after config resolution: trains, prints the summary and
// a short sample. Returns the process exit code.
int run_train_job(const config::JobConfig& job);

}  // namespace titan::train
