#include "titan/train/trainer.h"

#include <unistd.h>

#include <fmt/core.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>

#include "titan/autograd/node.h"
#include "titan/checkpoint/hf_config.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/checkpoint/distributed_checkpoint.h"
#include "titan/checkpoint/train_checkpoint.h"
#include "titan/config/resolve.h"
#include "titan/core/fs.h"
#include "titan/core/host_alloc.h"
#include "titan/core/memory_stats.h"
#include "titan/core/philox.h"
#include "titan/data/token_cache.h"
#include "titan/distributed/context_parallel.h"
#include "titan/distributed/expert_parallel.h"
#include "titan/models/common/overrides.h"
#include "titan/distributed/fsdp.h"
#include "titan/distributed/parallel_dims.h"
#include "titan/distributed/tensor_parallel.h"
#include "titan/distributed/pipeline.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/models/family.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/loss.h"
#include "titan/ops/reduce.h"
#include "titan/optim/grad_clip.h"
#include "titan/train/checkpoint_pieces.h"
#include "titan/train/document_sources.h"
#include "titan/train/initial_load.h"
#include "titan/train/metrics.h"
#include "titan/train/trainer_ckpt.h"

namespace titan::train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {
std::atomic<int> g_signal{0};
void on_signal(int sig) { g_signal.store(sig); }
// SIGINT/SIGTERM set g_signal while a train() runs; the previous handlers come back
// when it returns or throws.
struct SignalGuard {
  using Handler = void (*)(int);
  Handler prev_int, prev_term;
  SignalGuard() {
    g_signal.store(0);
    prev_int = std::signal(SIGINT, on_signal);
    prev_term = std::signal(SIGTERM, on_signal);
  }
  ~SignalGuard() {
    std::signal(SIGINT, prev_int);
    std::signal(SIGTERM, prev_term);
  }
};
constexpr double kMiB = 1024.0 * 1024.0;
// v of every cp rank, added in cp rank order (the same on every rank).
double sum_over_cp(const distributed::DeviceMesh& mesh, double v) {
  distributed::ProcessGroup& g = mesh.group(distributed::MeshDim::cp);
  std::vector<double> all(static_cast<size_t>(g.size()));
  g.all_gather_bytes(&v, sizeof v, all.data());
  double total = 0;
  for (double x : all) total += x;
  return total;
}
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
}  // namespace

bool nonfinite_step_guard(int64_t step, double loss, double grad_norm, bool skip) {
  if (std::isfinite(loss) && std::isfinite(grad_norm)) return true;
  TITAN_CHECK(skip,
              "step {}: loss {} / grad_norm {} is not finite (diverged: lower optimizer.lr or enable "
              "clipping; training.skip_nonfinite_steps=true skips such steps); no update was made",
              step, loss, grad_norm);
  fmt::print("step {}: loss {} / grad_norm {} is not finite: step skipped (training.skip_nonfinite_steps)\n",
             step, loss, grad_norm);
  return false;
}

double mfu_peak_flops(double configured) {
  if (configured > 0.0) return configured;
  const double per_core = kernels::cpu::cpu_isa() == kernels::cpu::Isa::avx512
                              ? config::kPeakFlopsPerCoreAvx512
                              : config::kPeakFlopsPerCoreAvx2;
  return per_core * num_threads();
}


Trainer::Trainer(const config::JobConfig& job) : job_(job) { build(); }
Trainer::~Trainer() = default;

void Trainer::build() {
  config::validate(job_);
  host_cache_.emplace(static_cast<size_t>(job_.training.host_cache_mb) << 20);
  dump_ = job_.job.dump_folder.empty() ? std::string("outputs/run") : job_.job.dump_folder;
  create_output_dir(dump_, "job.dump_folder");
  const std::string& tp = job_.model.tokenizer_path;
  const std::string tok_path = tp.empty()                         ? std::string("byte")
                               : data::is_builtin_tokenizer(tp) ? tp
                                                                : config::resolve_data_path(tp);
  tok_ = data::load_tokenizer(tok_path);
  auto mcfg = model_config_from_job(job_, tok_->vocab_size());
  // The layout, checked the same way on every rank before any work.
  const distributed::ModelDims dims{mcfg.num_hidden_layers, mcfg.num_attention_heads, mcfg.num_key_value_heads,
                                    mcfg.intermediate_size, mcfg.vocab_size, mcfg.num_experts};
  auto world = distributed::world();
  const distributed::MeshShape shape = distributed::resolve_parallel_dims(job_, world->size(), dims);
  distributed::refuse_unimplemented(shape);
  distributed::TensorParallel::check_model(mcfg, shape.tp, job_.parallelism.enable_sequence_parallel,
                                           job_.training.seq_len);
  distributed::ContextParallel::check_model(mcfg, shape.cp);
  TITAN_CHECK(shape.pp == 1 || mcfg.final_logit_softcapping == 0,
              "parallelism.pipeline_parallel_degree={}: final_logit_softcapping is not supported with pipeline "
              "parallelism", shape.pp);
  distributed::PipelinePlan pplan =
      distributed::plan_pipeline(job_, shape.pp, mcfg.num_hidden_layers, mcfg.tie_word_embeddings);
  loader_rows_ = shape.pp > 1 ? pplan.microbatch_size : job_.training.local_batch_size;
  mesh_ = std::make_unique<distributed::DeviceMesh>(world, shape);
  rank0_ = world->rank() == 0;
  // Context parallelism folds cp into FSDP (parameters sharded over dp_shard × cp).
  const bool sharded = mesh_->dp_size() > 1 || shape.cp > 1;
  // Parameters are gathered only over dp_shard × cp: with one rank there, nothing is.
  TITAN_CHECK(shape.dp_shard * shape.cp > 1 || job_.parallelism.fsdp_reshard_after_forward == "default",
              "parallelism.fsdp_reshard_after_forward={} needs FSDP sharding (data_parallel_shard_degree × "
              "context_parallel_degree > 1); this layout shards no parameter",
              job_.parallelism.fsdp_reshard_after_forward);
  if (shape.cp > 1) {
    TITAN_CHECK(job_.optimizer.name != config::OptimizerName::muon,
                "optimizer.name=muon with parallelism.context_parallel_degree={} is not supported (Muon "
                "orthogonalises whole matrices; FSDP over dp_shard × cp holds row shards)",
                shape.cp);
    TITAN_CHECK(job_.model.compute_dtype != config::ComputeDType::bf16,
                "model.compute_dtype=bf16 with parallelism.context_parallel_degree={} is not supported: bf16 "
                "compute covers the whole model's forward on one rank or under FSDP",
                shape.cp);
    // Sequence parallelism splits each cp rank's tokens over tp.
    TITAN_CHECK(!job_.parallelism.enable_sequence_parallel || (job_.training.seq_len / shape.cp) % shape.tp == 0,
                "parallelism.enable_sequence_parallel with context_parallel_degree={}: tensor_parallel_degree={} "
                "must divide training.seq_len / context_parallel_degree = {}",
                shape.cp, shape.tp, job_.training.seq_len / shape.cp);
    cp_ = std::make_unique<distributed::ContextParallel>(mesh_->group(distributed::MeshDim::cp));
  }
  if (sharded) {
    TITAN_CHECK(job_.optimizer.name != config::OptimizerName::muon,
                "optimizer.name=muon with a data-parallel degree of {} is not supported (Muon orthogonalises "
                "whole matrices; FSDP holds row shards)",
                mesh_->dp_size());
  }
  if (shape.tp > 1) {
    TITAN_CHECK(job_.optimizer.name != config::OptimizerName::muon,
                "optimizer.name=muon with parallelism.tensor_parallel_degree={} is not supported (Muon "
                "orthogonalises whole matrices; tensor parallelism holds row and column pieces)",
                shape.tp);
  }
  // The full model's initial weights: from training.seed, then those of
  // checkpoint.initial_load_path when set (a resumed checkpoint replaces both later).
  const auto init = [&](models::Decoder& m) {
    m.init_weights(static_cast<uint64_t>(job_.training.seed),
                   job_.model.init == config::ModelInit::gpt2 ? models::InitScheme::gpt2 : models::InitScheme::family);
    if (!job_.checkpoint.initial_load_path.empty()) load_initial_weights(m, job_.checkpoint.initial_load_path);
  };
  if (shape.tp > 1) {
    // The full model is initialised on every rank from the seed, then sliced.
    tp_ = std::make_unique<distributed::TensorParallel>(*mesh_, mcfg, job_.parallelism.enable_sequence_parallel);
    model_ = tp_->build(init);
  } else {
    model_ = std::make_unique<models::Decoder>(mcfg);
    init(*model_);
  }
  // Component overrides; the job config records their resolved form (config.toml). A
  // model.hf_config written by a titan export brings the overrides its run recorded,
  // unless model.overrides names others.
  if (job_.model.overrides.empty() && !job_.model.hf_config.empty()) {
    const std::string hf_path = config::resolve_data_path(job_.model.hf_config);
    job_.model.overrides = models::hf_recorded_overrides(load_hf_config(hf_path), hf_path);
  }
  job_.model.overrides = models::apply_overrides(*model_, job_.model.overrides);
  model_->activation_checkpoint = job_.training.activation_checkpoint == config::ActivationCheckpoint::full
                                      ? models::ActivationCheckpoint::full
                                      : models::ActivationCheckpoint::none;
  if (shape.pp > 1) pipeline_ = std::make_unique<distributed::Pipeline>(*model_, *mesh_, std::move(pplan), tp_.get());
  if (pipeline_ && cp_) pipeline_->set_context_parallel(cp_.get());  // CP inside every stage
  TITAN_CHECK(job_.model.compute_dtype != config::ComputeDType::bf16 || (shape.tp == 1 && shape.pp == 1),
              "model.compute_dtype=bf16 with parallelism.tensor_parallel_degree={} / pipeline_parallel_degree={} "
              "is not supported: bf16 compute covers the whole model's forward on one rank or under FSDP",
              shape.tp, shape.pp);
  model_->set_compute_bf16(job_.model.compute_dtype == config::ComputeDType::bf16);
  if (sharded) {
    // One FSDP unit per transformer block (TorchTitan's fully_shard per layer); under
    // PP, over this rank's stages only.
    std::vector<std::pair<std::string, const nn::Module*>> blocks;
    for (size_t i = 0; i < model_->layers.size(); ++i)
      blocks.emplace_back("layers." + std::to_string(i), model_->layers[i]);
    std::function<bool(const std::string&)> include;
    if (pipeline_) {
      blocks = pipeline_->blocks();
      include = [p = pipeline_.get()](const std::string& name) { return p->owns(name); };
    }
    std::vector<std::pair<std::string, Tensor>> params;
    if (shape.ep > 1) {
      // The routed experts are sharded over ep (expert_parallel.h), the rest by FSDP;
      // under PP, those of this rank's stages.
      const distributed::Pipeline* pp = pipeline_.get();
      std::function<bool(int64_t)> holds;
      if (pp) holds = [pp](int64_t l) { return pp->owns("layers." + std::to_string(l) + ".moe"); };
      ep_ = std::make_unique<distributed::ExpertParallel>(*model_, *mesh_, holds);
      include = [pp](const std::string& name) {
        return !distributed::ExpertParallel::is_expert_parameter(name) && (!pp || pp->owns(name));
      };
      if (pipeline_) pipeline_->set_expert_parallel(ep_.get());
    }
    fsdp_ = std::make_unique<distributed::FullyShard>(*model_, *mesh_, blocks, include,
                                                      job_.parallelism.fsdp_reshard_after_forward != "never");
    params = fsdp_->shards();
    if (ep_) params.insert(params.end(), ep_->shards().begin(), ep_->shards().end());
    opt_ = std::make_unique<optim::Optimizer>(optim::to_param_refs(params), optimizer_config_from_job(job_));
  } else {
    opt_ = std::make_unique<optim::Optimizer>(
        optim::to_param_refs(pipeline_ ? pipeline_->parameters() : model_->named_parameters()),
        optimizer_config_from_job(job_));
  }
  sched_ = std::make_unique<optim::LRScheduler>(lr_config_from_job(job_), job_.training.steps);

  ckpt_ = std::make_unique<Ckpt>();
  ckpt_->folder = dump_ + "/" + job_.checkpoint.folder;
  if (build_document_loaders()) return;
  data::DatasetSpec spec;
  spec.format = data::parse_dataset_format(job_.training.dataset, "training.dataset");
  spec.path = config::resolve_data_path(job_.training.dataset_path);
  data::TokenCacheOptions copt;
  copt.cache_dir = dump_ + "/cache";
  const double vf = job_.validation.enabled ? job_.validation.split_fraction : 0.0;
  auto train_ds = data::load_token_dataset(spec, data::Split::train, vf, *tok_, copt);
  data::LoaderOptions lo;
  lo.mode = data::SamplingMode::random;
  lo.batch_size = loader_rows_;
  lo.seq_len = job_.training.seq_len;
  lo.seed = static_cast<uint64_t>(job_.training.seed);
  loader_ = std::make_unique<data::DataLoader>(train_ds, lo);
  if (job_.validation.enabled) {
    auto val_ds = data::load_token_dataset(spec, data::Split::validation, vf, *tok_, copt);
    val_loader_ = std::make_unique<data::ValidationLoader>(val_ds, lo, job_.validation.steps);
  }
}

bool Trainer::build_document_loaders() {
  const DocumentSourceFn source = find_document_source(job_.training.dataset);
  if (!source) return false;
  // Documents packed whole into rows of seq_len (masked_documents.h): positions restart
  // per document, no attention or target across documents, loss on masked tokens only.
  data::MaskedLoaderOptions lo;
  lo.batch_size = loader_rows_;
  lo.seq_len = job_.training.seq_len;
  lo.seed = static_cast<uint64_t>(job_.training.seed);
  lo.pad_id = tok_->pad_id() >= 0 ? tok_->pad_id() : 0;
  doc_loader_ = std::make_unique<data::MaskedDocumentLoader>(
      std::make_shared<const data::MaskedDocuments>(source(job_, *tok_, data::Split::train)), lo);
  if (job_.validation.enabled) {
    lo.shuffle = false;  // the same batches every evaluation
    doc_val_loader_ = std::make_unique<data::MaskedDocumentLoader>(
        std::make_shared<const data::MaskedDocuments>(source(job_, *tok_, data::Split::validation)), lo);
  }
  return true;
}

namespace {

// Σ over the batch's documents (its cu_seqlens segments) of length².
double sum_squared_documents(const data::Batch& b) {
  const Tensor cu = b.input.cu_seqlens.contiguous();
  const int32_t* c = cu.data<int32_t>();
  double s = 0;
  for (int64_t i = 0; i + 1 < cu.numel(); ++i) {
    const double l = static_cast<double>(c[i + 1] - c[i]);
    s += l * l;
  }
  return s;
}

}  // namespace

double Trainer::train_step(int64_t step, double& grad_norm, int64_t& tokens, double& attended) {
  const int64_t dp = mesh_->dp_size(), me = mesh_->dp_rank();
  // Microbatches per rank: the gradient accumulation steps, × the pipeline microbatches.
  const int64_t runs = config::grad_accum_steps(job_, mesh_->world_size());
  const int64_t accum = runs * (pipeline_ ? pipeline_->plan().n_microbatches : 1);
  // The step's accum × dp microbatches are drawn in the order of a 1-rank run with the
  // same global batch; dp rank q trains on microbatches j ≡ q (mod dp) and skips the
  // others' rows. Every rank thus knows the step's token counts without communication,
  // and FSDP's gradient sum can follow the 1-rank accumulation order (fsdp.h).
  std::vector<data::Batch> micro;
  int64_t valid = 0;
  tokens = 0;
  attended = 0;
  for (int64_t j = 0; j < accum * dp; ++j) {
    data::Batch b = doc_loader_ ? doc_loader_->next() : loader_->next();
    valid += b.num_targets;
    tokens += b.num_tokens();
    attended += sum_squared_documents(b);
    if (j % dp == me) micro.push_back(std::move(b));
  }
  TITAN_CHECK(valid > 0, "train step {}: every target of the batch is masked", step);
  // loss = Σ token CE / valid tokens of the whole step over all ranks (TorchTitan's
  // global token mean).
  std::vector<double> losses;
  for (int64_t r = 0; pipeline_ && r < runs; ++r) {
    const std::vector<double> l = pipeline_->train(micro, static_cast<size_t>(r * pipeline_->plan().n_microbatches),
                                                   1.0 / static_cast<double>(valid), fsdp_.get());
    losses.insert(losses.end(), l.begin(), l.end());
  }
  for (auto& b : micro) {
    if (pipeline_) break;
    if (fsdp_) fsdp_->unshard_root();
    // The backward below sends float(1 / valid) to every row: computed with the forward.
    const double inv_valid = 1.0 / static_cast<double>(valid);
    if (cp_ && tp_) {
      // CP × TP: this cp rank's tokens through the tp model; the loss is the sum of the
      // cp ranks' vocabulary-parallel sums, added in cp rank order.
      const distributed::ContextParallel::Local local = cp_->shard(b.input, b.targets, b.seq_len);
      const models::ContextParallelScope cp_scope(cp_.get());
      Tensor l = tp_->loss(model_->forward(local.input), model_->lm_head_weight(), local.targets);
      losses.push_back(sum_over_cp(*mesh_, l.item<double>()));
      scale(l, inv_valid).backward();
      tp_->reduce_partial_grads();
      fsdp_->reduce_gradients();
      continue;
    }
    if (cp_) {
      // This cp rank's tokens; the per-token losses of all cp ranks, in token order,
      // are summed as one rank sums them (the 1-rank bits).
      const distributed::ContextParallel::Local local = cp_->shard(b.input, b.targets, b.seq_len);
      const models::ContextParallelScope cp_scope(cp_.get());
      Tensor rows = linear_cross_entropy(model_->forward(local.input), model_->lm_head_weight(), local.targets, -100,
                                         0.0, Reduction::none, /*expected_grad=*/inv_valid);
      losses.push_back(sum(cp_->gather_rows(rows)).item<double>());
      scale(sum(rows), inv_valid).backward();
      fsdp_->reduce_gradients();
      continue;
    }
    Tensor hidden = model_->forward(b.input);
    Tensor l = tp_ ? tp_->loss(hidden, model_->lm_head_weight(), b.targets)
                   : model_->loss_sum(hidden, b.targets, /*expected_grad=*/inv_valid);
    losses.push_back(l.item<double>());
    scale(l, inv_valid).backward();
    if (tp_ && fsdp_) tp_->reduce_partial_grads();  // FSDP takes each microbatch's full gradients
    if (fsdp_) fsdp_->reduce_gradients();
    if (ep_) ep_->reduce_gradients();
  }
  if (tp_ && !fsdp_) tp_->reduce_partial_grads();
  std::vector<double> all(static_cast<size_t>(accum * dp));
  if (dp > 1)
    mesh_->dp().all_gather_bytes(losses.data(), losses.size() * sizeof(double), all.data());
  else
    all = losses;
  double loss_sum = 0;  // microbatch j = m·dp + q, summed in j order as one rank does
  for (int64_t m = 0; m < accum; ++m)
    for (int64_t q = 0; q < dp; ++q) loss_sum += all[static_cast<size_t>(q * accum + m)];
  if (pipeline_) {  // over the stages (and, with tp, the tp pieces)
    auto refs = opt_->param_refs();
    grad_norm = job_.training.max_norm > 0 ? pipeline_->clip_grad_norm_(refs, job_.training.max_norm, fsdp_.get())
                                           : pipeline_->grad_norm(refs, fsdp_.get());
  } else if (tp_ && ep_) {
    // EP × TP: FSDP's shards of the tp pieces by TP's norm, plus the experts' full
    // gradients (replicated over tp) by EP's.
    auto refs = opt_->param_refs();
    std::vector<optim::ParamRef> dense;
    for (const auto& r : refs)
      if (!distributed::ExpertParallel::is_expert_parameter(r.name)) dense.push_back(r);
    const double tpn = tp_->grad_norm(dense, &mesh_->group({distributed::MeshDim::dp_shard, distributed::MeshDim::cp}));
    double norm_sq = tpn * tpn;
    for (double v : ep_->grad_norm_sq_parts()) norm_sq += v;
    grad_norm = static_cast<float>(std::sqrt(norm_sq));
    if (job_.training.max_norm > 0) optim::scale_grads_for_norm_(refs, static_cast<float>(grad_norm), job_.training.max_norm);
  } else if (tp_) {
    auto refs = opt_->param_refs();
    distributed::ProcessGroup* shards =
        fsdp_ ? &mesh_->group({distributed::MeshDim::dp_shard, distributed::MeshDim::cp}) : nullptr;
    grad_norm = job_.training.max_norm > 0 ? tp_->clip_grad_norm_(refs, shards, job_.training.max_norm)
                                           : tp_->grad_norm(refs, shards);
  } else if (ep_) {
    // ‖g‖² per parameter from FSDP's shards and EP's experts, summed in model order.
    const std::vector<double> fs = fsdp_->grad_norm_sq_parts(), es = ep_->grad_norm_sq_parts();
    double norm_sq = 0.0;
    size_t a = 0, e = 0;
    for (const auto& [name, t] : model_->named_parameters())
      norm_sq += distributed::ExpertParallel::is_expert_parameter(name) ? es.at(e++) : fs.at(a++);
    grad_norm = static_cast<float>(std::sqrt(norm_sq));
    if (job_.training.max_norm > 0) {
      auto refs = opt_->param_refs();
      optim::scale_grads_for_norm_(refs, static_cast<float>(grad_norm), job_.training.max_norm);
    }
  } else if (fsdp_) {
    grad_norm = job_.training.max_norm > 0 ? fsdp_->clip_grad_norm_(job_.training.max_norm) : fsdp_->grad_norm();
  } else {
    auto refs = opt_->param_refs();
    grad_norm = job_.training.max_norm > 0 ? optim::clip_grad_norm_(refs, job_.training.max_norm)
                                           : optim::grad_norm(refs);
  }
  const double loss = loss_sum / static_cast<double>(valid);
  if (!nonfinite_step_guard(step + 1, loss, grad_norm, job_.training.skip_nonfinite_steps)) {
    opt_->zero_grad();  // skipped: no update
    return loss;
  }
  if (ckpt_->mgr) ckpt_->mgr->wait_snapshot();  // a save in flight copies the weights before they change
  sched_->apply(*opt_, step);
  opt_->step();
  // The aux-loss-free bias update uses the step's expert loads of all dp ranks (an
  // integer sum: the 1-rank loads exactly), so every rank applies the same update.
  if (mesh_->dp_size() > 1)
    model_->update_expert_bias([this](std::vector<int64_t>& loads) {
      Tensor t = Tensor::from_vector(loads, {static_cast<int64_t>(loads.size())});
      mesh_->dp().all_reduce(t);
      loads = t.to_vector<int64_t>();
    });
  else
    model_->update_expert_bias();
  opt_->zero_grad();
  return loss;
}

double Trainer::evaluate() {
  TITAN_CHECK(val_loader_ != nullptr || doc_val_loader_ != nullptr, "evaluate: validation is disabled");
  autograd::NoGradGuard ng;
  double sum = 0;
  int64_t n = 0;
  const int64_t nb = val_loader_ ? val_loader_->num_batches()
                     : job_.validation.steps > 0 ? std::min(job_.validation.steps, doc_val_loader_->num_batches())
                                                 : doc_val_loader_->num_batches();
  // Every rank evaluates every batch (the same bits as one rank; FSDP's forward is
  // collective over dp_shard, so the ranks must run the same forwards).
  if (fsdp_) fsdp_->unshard_root();
  for (int64_t i = 0; i < nb; ++i) {
    data::Batch b = val_loader_ ? val_loader_->batch(i) : doc_val_loader_->batch(i);
    n += b.num_targets;
    if (pipeline_) {
      sum += pipeline_->loss_sum(b, fsdp_.get());
      continue;
    }
    if (cp_ && tp_) {
      const distributed::ContextParallel::Local local = cp_->shard(b.input, b.targets, b.seq_len);
      const models::ContextParallelScope cp_scope(cp_.get());
      sum += sum_over_cp(*mesh_, tp_->loss(model_->forward(local.input), model_->lm_head_weight(), local.targets)
                                     .item<double>());
      continue;
    }
    if (cp_) {
      const distributed::ContextParallel::Local local = cp_->shard(b.input, b.targets, b.seq_len);
      const models::ContextParallelScope cp_scope(cp_.get());
      Tensor rows = linear_cross_entropy(model_->forward(local.input), model_->lm_head_weight(), local.targets, -100,
                                         0.0, Reduction::none);
      sum += titan::sum(cp_->gather_rows(rows)).item<double>();
      continue;
    }
    Tensor hidden = model_->forward(b.input);
    sum += (tp_ ? tp_->loss(hidden, model_->lm_head_weight(), b.targets) : model_->loss_sum(hidden, b.targets))
               .item<double>();
  }
  if (fsdp_) fsdp_->reshard_all();
  return sum / static_cast<double>(n);
}

TrainResult Trainer::train() {
  TrainResult res;
  res.dump_folder = dump_;
  if (rank0_) config::save_config(job_);
  const bool resumed = try_resume();
  res.steps_done = start_step_;
  // Rank 0 prints and writes metrics.jsonl; every logged value is the whole job's.
  std::unique_ptr<MetricsLogger> metrics_file;
  if (rank0_) metrics_file = std::make_unique<MetricsLogger>(dump_ + "/metrics.jsonl", resumed, job_.metrics.jsonl);
  if (metrics_file && job_.metrics.enable_tensorboard)
    metrics_file->enable_tensorboard(dump_ + "/" + job_.metrics.save_tb_folder);
  auto log_row = [&](const nlohmann::json& row) {
    if (metrics_file) metrics_file->log(row);
  };
  SignalGuard signals;
  const models::TransformerConfig& mcfg = tp_ ? tp_->full_config() : model_->config();  // the whole model's
  // MFU's FLOPs per token: TorchTitan's count, its attention term over the keys a token
  // of the step attends to in its own document (packed short documents attend to far
  // fewer than seq_len keys; one document per sample gives seq_len).
  const auto flops_per_token = [&](int64_t tokens, double attended) {
    const int64_t keys = tokens > 0 ? std::llround(attended / static_cast<double>(tokens)) : job_.training.seq_len;
    return mcfg.train_flops_per_token(std::max<int64_t>(1, keys));
  };
  // metrics.peak_flops is the whole job's; auto = one rank's peak × the ranks.
  const double peak_flops = job_.metrics.peak_flops > 0 ? job_.metrics.peak_flops
                                                        : mfu_peak_flops(0.0) * mesh_->world_size();
  const int64_t total = job_.training.steps;
  if (rank0_)
    fmt::print("model: {} {} params, {} layers, dim {}, vocab {} | data {} tokens | kernels {} | threads {}{}\n",
             mcfg.family, tp_ ? mcfg.num_params() : model_->num_parameters(), mcfg.num_hidden_layers,
             mcfg.hidden_size, mcfg.vocab_size,
             doc_loader_ ? doc_loader_->documents().num_tokens() : static_cast<int64_t>(loader_->data().tokens().size()),
             kernels::cpu::isa_name(kernels::cpu::cpu_isa()), num_threads(),
             mesh_->world_size() > 1 ? fmt::format(" per rank | {} ranks: {}", mesh_->world_size(), mesh_->shape().str())
                                     : std::string());
  if (rank0_ && pipeline_) {
    const distributed::PipelinePlan& pl = pipeline_->plan();
    std::string stages;
    for (const auto& st : pl.stages)
      stages += fmt::format(" [{}{}..{}){}", st.embeddings ? "emb " : "", st.first_layer, st.end_layer,
                            st.head ? " head" : "");
    fmt::print("pipeline: {} | {} stages, {} per rank:{} | {} microbatches of {} rows per run\n",
               distributed::pipeline_schedule_name(pl.schedule), pl.num_stages(), pl.stages_per_rank, stages,
               pl.n_microbatches, pl.microbatch_size);
  }
  if (job_.validation.enabled && start_step_ == 0) {
    double v = evaluate();
    log_row({{"step", 0}, {"val_loss", v}});
    if (rank0_) fmt::print("step {:>5} | val_loss {:.4f}\n", 0, v);
    res.final_val_loss = v;
  }
  int64_t last_write_logged = -1;
  for (int64_t step = start_step_; step < total; ++step) {
    auto t0 = Clock::now();
    const int64_t mem_base = storage_bytes_live();
    reset_storage_peak();
    if (fsdp_) fsdp_->reset_stats();  // the step's collectives only (not an evaluation's)
    if (ep_) ep_->reset_stats();
    if (tp_) tp_->stats() = {};
    if (cp_) cp_->stats() = {};
    double gnorm = 0, attended = 0;
    int64_t tokens = 0;
    const double lr = sched_->lr(step, job_.optimizer.lr);
    const double loss = train_step(step, gnorm, tokens, attended);
    auto t1 = Clock::now();
    // An asynchronous write of several ranks is published once every rank has finished it.
    const double ckpt_poll_ms = ckpt_->mgr ? ckpt_->mgr->poll() : 0.0;
    // Memory figures: the largest over the ranks.
    distributed::ProcessGroup& world = mesh_->world();
    const int64_t mem_peak = world.all_reduce_i64(storage_bytes_peak(), distributed::ReduceOp::max);
    const int64_t mem_base_max = world.all_reduce_i64(mem_base, distributed::ReduceOp::max);
    const double rss = static_cast<double>(
                           world.all_reduce_i64(static_cast<int64_t>(rss_mb() * kMiB), distributed::ReduceOp::max)) /
                       kMiB;
    const double step_ms = ms_between(t0, t1);
    const double tps = tokens / (step_ms / 1000.0);
    const int64_t done = step + 1;
    nlohmann::json row = {{"step", done},
                          {"loss", loss},
                          {"lr", lr},
                          {"grad_norm", gnorm},
                          {"tokens_per_s", tps},
                          {"mfu", flops_per_token(tokens, attended) * tps / peak_flops},
                          {"step_ms", step_ms},
                          {"rss_mb", rss},
                          {"mem_base_mb", mem_base_max / kMiB},
                          {"mem_step_mb", (mem_peak - mem_base_max) / kMiB}};
    if (fsdp_ || tp_) {  // comm_*: all of rank 0's collectives of the step; fsdp_* / tp_*: their parts
      double ms = 0;
      int64_t bytes = 0;
      if (fsdp_) {
        const distributed::FsdpStats& fs = fsdp_->stats();
        row["fsdp_comm_ms"] = fs.comm_ms;
        row["fsdp_all_gather_bytes"] = fs.all_gather_bytes;
        row["fsdp_reduce_bytes"] = fs.reduce_bytes;
        ms += fs.comm_ms;
        bytes += fs.all_gather_bytes + fs.reduce_bytes;
        fsdp_->reset_stats();
      }
      if (ep_) {
        const distributed::EpStats& es = ep_->stats();
        row["ep_comm_ms"] = es.comm_ms;
        row["ep_a2a_bytes"] = es.a2a_bytes;
        row["ep_reduce_bytes"] = es.reduce_bytes;
        ms += es.comm_ms;
        bytes += es.a2a_bytes + es.reduce_bytes;
      }
      if (tp_) {
        distributed::TpStats& ts = tp_->stats();
        row["tp_comm_ms"] = ts.comm_ms;
        row["tp_comm_bytes"] = ts.bytes;
        ms += ts.comm_ms;
        bytes += ts.bytes;
        ts = {};
      }
      if (cp_) {
        distributed::TpStats& cs = cp_->stats();
        row["cp_comm_ms"] = cs.comm_ms;
        row["cp_comm_bytes"] = cs.bytes;
        ms += cs.comm_ms;
        bytes += cs.bytes;
        cs = {};
      }
      row["comm_ms"] = ms;
      row["comm_bytes"] = bytes;
    }
    for (auto& [k, v] : model_->take_moe_metrics()) row[k] = v;
    if (pipeline_) {  // rank 0's stage traffic and time blocked waiting for its peers
      row["pp_bytes"] = pipeline_->stats().bytes_sent;
      row["pp_wait_ms"] = pipeline_->stats().recv_wait_ms;
      pipeline_->reset_stats();
    }
    if (ckpt_poll_ms > 0) row["checkpoint_poll_ms"] = ckpt_poll_ms;
    if (!std::isfinite(loss) || !std::isfinite(gnorm)) row["skipped_nonfinite"] = true;
    res.final_loss = loss;
    const bool last = done == total;
    if (job_.validation.enabled && (done % job_.validation.freq == 0 || last)) {
      res.final_val_loss = evaluate();
      row["val_loss"] = res.final_val_loss;
    }
    const int sig = g_signal.load();
    const bool stop = sig != 0;
    if (job_.checkpoint.enable && (done % job_.checkpoint.interval == 0 || last || stop)) {
      double blocking = 0;
      ckpt_->row = row;
      save_checkpoint(done, blocking);
      row["checkpoint_blocking_ms"] = blocking;
    }
    log_checkpoint_write(row, last_write_logged);
    log_row(row);
    if (rank0_ && (done % job_.metrics.log_freq == 0 || last || row.contains("val_loss"))) {
      fmt::print("step {:>5} | loss {:.4f}{} | lr {:.2e} | grad_norm {:.3f} | {:.0f} tok/s | mfu {:.1f}% | {:.0f} ms\n",
                 done, loss, row.contains("val_loss") ? fmt::format(" | val_loss {:.4f}", row["val_loss"].get<double>()) : "",
                 lr, gnorm, tps, 100.0 * row["mfu"].get<double>(), step_ms);
      std::fflush(stdout);
    }
    res.steps_done = done;
    if (stop) {
      res.interrupted = true;
      res.signal = sig;
      if (job_.checkpoint.enable)
        fmt::print("signal {} received: checkpoint saved at step {}, exiting\n", sig, done);
      else
        fmt::print("signal {} received at step {}: exiting (checkpoint.enable is false: nothing saved)\n", sig, done);
      break;
    }
  }
  if (ckpt_->mgr) {
    ckpt_->mgr->wait();  // the last (asynchronous) write; its duration gets a line of its own
    nlohmann::json row = {{"step", res.steps_done}};
    if (log_checkpoint_write(row, last_write_logged)) log_row(row);
  }
  if (!res.interrupted && job_.checkpoint.export_hf) export_hf();
  return res;
}

bool Trainer::log_checkpoint_write(nlohmann::json& row, int64_t& last_logged) const {
  if (!ckpt_->mgr || ckpt_->mgr->last_write_ms() < 0 || ckpt_->mgr->last_written_step() == last_logged)
    return false;
  row["checkpoint_write_ms"] = ckpt_->mgr->last_write_ms();
  row["checkpoint_step"] = ckpt_->mgr->last_written_step();
  last_logged = ckpt_->mgr->last_written_step();
  return true;
}

std::string Trainer::sample(const std::string& prompt, int64_t n, double temperature, uint64_t seed) {
  autograd::NoGradGuard ng;
  // Under FSDP every rank runs the same forwards (they gather the blocks together).
  if (fsdp_) fsdp_->unshard_root();
  std::vector<int32_t> ids = tok_->encode(prompt);
  if (ids.empty()) ids.push_back(tok_->bos_id() >= 0 ? tok_->bos_id() : static_cast<int32_t>('\n'));
  const size_t n_prompt = ids.size();
  const int64_t ctx = std::min<int64_t>(job_.training.seq_len, model_->config().max_position_embeddings);
  const int64_t V = tok_->vocab_size();
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int32_t> window(ids.end() - std::min<int64_t>(ctx, static_cast<int64_t>(ids.size())), ids.end());
    const models::ForwardBatch fb = models::make_packed_batch({window});
    // Under PP the rank of the last stage picks the token and tells the others.
    Tensor h = pipeline_ ? pipeline_->forward(fb, fsdp_.get()) : model_->forward(fb);
    int32_t next = 0;
    if (!h.defined()) {
      ids.push_back(pipeline_->broadcast_from_last(next));
      continue;
    }
    if (tp_) h = tp_->full_sequence(h);
    h = h.narrow(0, h.size(0) - 1, 1);
    Tensor logits = (tp_ ? tp_->logits(h, model_->lm_head_weight()) : model_->logits(h)).contiguous();
    const float* lp = logits.data<float>();
    if (temperature <= 0) {
      for (int64_t v = 1; v < V; ++v)
        if (lp[v] > lp[next]) next = static_cast<int32_t>(v);
    } else {
      double mx = lp[0];
      for (int64_t v = 1; v < V; ++v) mx = std::max<double>(mx, lp[v]);
      std::vector<double> p(V);
      double z = 0;
      for (int64_t v = 0; v < V; ++v) z += p[v] = std::exp((lp[v] - mx) / temperature);
      auto r = philox_draw(seed, static_cast<uint64_t>(i));
      double u = (static_cast<double>(r[0]) + static_cast<double>(r[1]) / 4294967296.0) / 4294967296.0 * z;
      for (int64_t v = 0; v < V; ++v) {
        u -= p[v];
        next = static_cast<int32_t>(v);
        if (u <= 0) break;
      }
    }
    ids.push_back(pipeline_ ? pipeline_->broadcast_from_last(next) : next);
  }
  if (fsdp_) fsdp_->reshard_all();
  return tok_->decode(std::vector<int32_t>(ids.begin() + n_prompt, ids.end()));
}

int run_train_job(const config::JobConfig& job) {
  auto t0 = Clock::now();
  Trainer trainer(job);
  TrainResult r = trainer.train();
  const double secs = ms_between(t0, Clock::now()) / 1000.0;
  const bool rank0 = distributed::world()->rank() == 0;
  if (rank0) {
    fmt::print("done: {} steps in {:.1f} s | final loss {:.4f}", r.steps_done, secs, r.final_loss);
    if (r.final_val_loss >= 0) fmt::print(" | val_loss {:.4f}", r.final_val_loss);
    if (job.metrics.jsonl)
      fmt::print(" | metrics: {}/metrics.jsonl\n", r.dump_folder);
    else
      fmt::print(" | metrics.jsonl off\n");
  }
  if (!r.interrupted && !find_document_source(job.training.dataset)) {  // a text sample suits stream data only
    const std::string text = trainer.sample("\n", 300, 0.8, 1337);
    if (rank0) fmt::print("--- sample (temperature 0.8) ---\n{}\n---\n", text);
  }
  return r.interrupted ? 128 + r.signal : 0;
}

}  // namespace titan::train
