#include "titan/rl/controller.h"

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <filesystem>

#include "titan/autograd/node.h"
#include "titan/checkpoint/hf_config.h"
#include "titan/checkpoint/hf_weights.h"
#include "titan/checkpoint/sharded.h"
#include "titan/config/resolve.h"
#include "titan/core/error.h"
#include "titan/core/fs.h"
#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/models/common/overrides.h"
#include "titan/models/family.h"
#include "titan/optim/grad_clip.h"
#include "titan/rl/controller_state.h"
#include "titan/rl/distributed_controller.h"
#include "titan/rl/weight_sync.h"
#include "titan/train/trainer.h"

namespace titan::rl {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::atomic<int> g_signal{0};
void on_signal(int sig) { g_signal.store(sig); }

// A copy of m with its weights, dtype and component overrides (the resolved entries
// applied to m): the generator computes as the trainer does.
std::unique_ptr<models::Decoder> copy_of(const models::Decoder& m, const std::vector<std::string>& overrides) {
  auto c = std::make_unique<models::Decoder>(m.config());
  c->set_compute_bf16(m.compute_bf16());
  models::apply_overrides(*c, overrides);
  sync_weights(m, *c);
  return c;
}

// The initial policy: an HF export folder (rl.init_from) or a random init, with its
// component overrides: model.overrides, else those the export records. The generator
// runs them too, so one it does not run is refused (apply_generator_overrides).
// `overrides` returns their resolved form.
std::unique_ptr<models::Decoder> initial_policy(const config::JobConfig& job, int64_t tok_vocab, std::string& desc,
                                                std::vector<std::string>& overrides) {
  const std::string& from = job.rl.init_from;
  if (from.empty()) {
    auto m = std::make_unique<models::Decoder>(train::model_config_from_job(job, tok_vocab));
    m->init_weights(static_cast<uint64_t>(job.training.seed), job.model.init == config::ModelInit::gpt2
                                                                  ? models::InitScheme::gpt2
                                                                  : models::InitScheme::family);
    desc = fmt::format("random init (seed {})", job.training.seed);
    overrides = models::apply_generator_overrides(*m, job.model.overrides, "titan rl");
    return m;
  }
  const std::string dir = config::resolve_data_path(from);
  TITAN_CHECK(fs::is_directory(dir), "rl.init_from='{}': '{}' is not a directory (run the SFT recipe first?)", from,
              dir);
  const HFConfig hf = load_hf_config(dir + "/config.json");
  models::TransformerConfig cfg = models::config_from_hf(hf);
  const SafetensorsCheckpoint weights(dir);
  check_hf_weights_match_config(hf, weights, dir + "/config.json");  // before the model allocates
  TITAN_CHECK(cfg.vocab_size >= tok_vocab, "rl.init_from='{}': vocab_size {} is smaller than the tokenizer's {}",
              from, cfg.vocab_size, tok_vocab);
  auto m = std::make_unique<models::Decoder>(cfg);
  {
    autograd::NoGradGuard ng;
    models::load_hf_state_dict(*m, weights.load_all(), dir);
  }
  desc = dir;
  overrides = job.model.overrides.empty()
                  ? models::apply_generator_overrides(*m, models::hf_recorded_overrides(hf, dir + "/config.json"),
                                                      "rl.init_from " + dir + "/config.json")
                  : models::apply_generator_overrides(*m, job.model.overrides, "titan rl");
  return m;
}

std::string tokenizer_path(const config::JobConfig& job) {
  if (!job.model.tokenizer_path.empty()) {
    const std::string& p = job.model.tokenizer_path;
    if (p == "byte" || p == "byte_chat") return p;
    return config::resolve_data_path(p);
  }
  if (!job.rl.init_from.empty()) return config::resolve_data_path(job.rl.init_from);
  return "byte";
}

json parse_env_config(const std::string& text) {
  if (text.empty()) return json::object();
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    fail("rl.env_config: not valid JSON ({}): {}", e.what(), text);
  }
  TITAN_CHECK(j.is_object(), "rl.env_config: expected a JSON object, got {}", j.type_name());
  return j;
}

}  // namespace

bool stop_requested() { return g_signal.load() != 0; }

bool is_timing_metric(const std::string& k) {
  return k.ends_with("_ms") || k.ends_with("_per_s") || k == "rss_mb" || k == "peak_rss_mb";
}

RLController::RLController(const config::JobConfig& job, std::optional<TaskSpec> task)
    : st_(std::make_unique<State>()) {
  State& s = *st_;
  config::validate(job);
  const RLRanks layout = resolve_rl_ranks(job, distributed::world()->size());
  TITAN_CHECK((layout.world_size > 1 && layout.dp_shard > 1) || job.parallelism.fsdp_reshard_after_forward == "default",
              "parallelism.fsdp_reshard_after_forward={} needs FSDP: titan rl shards its trainer only over 2 or "
              "more FSDP ranks (mpirun with a generator rank besides the trainer's dp_shard × tp ranks)",
              job.parallelism.fsdp_reshard_after_forward);
  s.job = job;
  const auto& rl = job.rl;
  TITAN_CHECK(rl.rollouts_per_step % rl.group_size == 0, "rl.rollouts_per_step={} must be a multiple of rl.group_size={}",
              rl.rollouts_per_step, rl.group_size);
  s.dump = job.job.dump_folder.empty() ? std::string("outputs/rl") : job.job.dump_folder;
  create_output_dir(s.dump, "job.dump_folder");
  s.tok = data::load_tokenizer(tokenizer_path(job));
  s.rollouter = std::make_unique<Rollouter>(task ? std::move(*task) : make_task(rl.env, parse_env_config(rl.env_config)),
                                            *s.tok);
  const TaskSpec& t = s.rollouter->task();
  s.policy = initial_policy(job, s.tok->vocab_size(), s.init_desc, s.job.model.overrides);
  // The policy update's logprobs run the fused LM-head kernel (titan::logprobs), which
  // has no soft-cap.
  TITAN_CHECK(s.policy->config().final_logit_softcapping == 0,
              "titan rl: final_logit_softcapping = {} is not supported (the policy update's fused logprobs have no "
              "soft-cap)", s.policy->config().final_logit_softcapping);
  s.policy->set_compute_bf16(job.model.compute_dtype == config::ComputeDType::bf16);
  s.gen = copy_of(*s.policy, s.job.model.overrides);
  if (rl.kl_coef > 0) {
    TITAN_CHECK(rl.ref_model.empty(), "rl.ref_model='{}': only the initial policy (empty) is supported as reference",
                rl.ref_model);
    s.ref = copy_of(*s.policy, s.job.model.overrides);
  }
  if (rl.max_offpolicy_steps > 0) s.staging = copy_of(*s.policy, s.job.model.overrides);
  s.opt = std::make_unique<optim::Optimizer>(optim::to_param_refs(s.policy->named_parameters()),
                                             train::optimizer_config_from_job(job));
  s.sched = std::make_unique<optim::LRScheduler>(train::lr_config_from_job(job), job.training.steps);
  s.dataset = std::make_unique<TaskDataset>(t.train, static_cast<uint64_t>(job.training.seed));

  const auto& g = job.generator;
  StepRolloutSettings& gs = s.gen_settings;
  gs.groups_per_step = rl.rollouts_per_step / rl.group_size;
  gs.rollout.group_size = rl.group_size;
  gs.rollout.sampling.temperature = g.temperature;
  gs.rollout.sampling.top_p = g.top_p;
  gs.rollout.sampling.top_k = g.top_k;
  gs.rollout.sampling.min_p = g.min_p;
  gs.rollout.sampling.max_tokens = g.max_tokens;
  gs.rollout.limits.max_turns = std::max(rl.max_turns, t.max_turns);
  gs.rollout.limits.max_total_tokens = rl.max_total_tokens;
  gs.engine.kv_cache_bytes = g.kv_cache_bytes;
  gs.engine.host_cache_bytes = g.host_cache_bytes;
  gs.engine.block_size = static_cast<int>(g.kv_block_size);
  gs.engine.max_num_seqs = g.max_num_seqs;
  gs.engine.max_num_batched_tokens = g.max_num_batched_tokens;
  gs.engine.enable_prefix_caching = g.enable_prefix_caching;
  gs.seed = static_cast<uint64_t>(g.seed);
  gs.advantage.std_normalize = rl.std_normalize;
  gs.dynamic_sampling = rl.dynamic_sampling;
  gs.max_sampling_rounds = rl.max_sampling_rounds;
  gs.overlong_buffer_len = rl.overlong_buffer_len;
  gs.overlong_penalty_factor = rl.overlong_penalty_factor;
  PolicyUpdateSettings& us = s.update_settings;
  us.loss.epsilon_low = rl.epsilon_low;
  us.loss.epsilon_high = rl.epsilon_high;
  us.loss.kl_coef = rl.kl_coef;
  us.loss.aggregation = rl.algorithm == config::RLAlgorithm::dapo ? LossAggregation::token_mean
                                                                 : LossAggregation::seq_mean_token_mean;
  us.temperature = gs.rollout.sampling.logprob_temperature();
  us.microbatch_tokens = rl.microbatch_tokens;
  s.ckpt_folder = s.dump + "/" + job.checkpoint.folder;
  if (layout.world_size > 1) s.setup_ranks(layout);
}

RLController::~RLController() = default;

double RLController::State::validate(json* row) {
  infer::EngineConfig ec = gen_settings.engine;
  ec.seed = gen_settings.seed;
  infer::Engine engine(*policy, tok.get(), ec);
  const ValidationResult v = validation_reward(engine, *rollouter, job.rl.val_samples, gen_settings.rollout.limits,
                                               gen_settings.rollout.sampling.max_tokens);
  if (row != nullptr && v.episodes > 0) {
    for (const RewardFn& f : rollouter->task().rubric.functions()) {
      double sum = 0;
      for (const TokenRollout& t : v.rollouts)
        for (const RewardComponent& c : t.rollout.rewards)
          if (c.name == f.name) sum += c.value;
      (*row)["val_" + f.name] = sum / static_cast<double>(v.episodes);
    }
  }
  return v.reward_mean;
}

void RLController::State::save_checkpoint(int64_t step, const DatasetState& ds) {
  if (ranks) {
    save_checkpoint_ranks(step, ds);
    return;
  }
  if (!ckpt)
    ckpt = std::make_unique<CheckpointManager>(ckpt_folder, job.checkpoint.keep_latest_k,
                                               job.checkpoint.async_mode == config::AsyncMode::async);
  TrainState t;
  t.step = step;
  t.extra["dataset"] = ds.to_json();
  t.extra["policy_version"] = policy_version;
  t.extra["seed"] = job.training.seed;
  t.extra["generator_seed"] = job.generator.seed;
  t.extra["kernel_isa"] = std::string(kernels::cpu::isa_name(kernels::cpu::cpu_isa()));
  ckpt->save(policy->named_parameters(), opt->state_dict(), t);
}

void RLController::State::load_policy(const LoadedCheckpoint& c) {
  autograd::NoGradGuard ng;
  for (auto& [name, p] : policy->named_parameters()) {
    auto it = c.model.find(name);
    TITAN_CHECK(it != c.model.end(), "checkpoint {}: model tensor '{}' missing", c.path, name);
    TITAN_CHECK(it->second.shape() == p.shape(), "checkpoint {}: '{}' has shape {}, the model expects {}", c.path,
                name, shape_str(it->second.shape()), shape_str(p.shape()));
    Tensor dst = p;
    dst.copy_(it->second);
  }
}

bool RLController::State::try_resume() {
  if (!job.checkpoint.resume) return false;
  auto latest = CheckpointManager::latest(ckpt_folder);
  if (!latest) return false;
  LoadedCheckpoint c = CheckpointManager::load(*latest);
  if (ranks) {
    load_checkpoint_ranks(c);
  } else {
    load_policy(c);
    optim::NamedTensors ost(c.optimizer.begin(), c.optimizer.end());
    opt->load_state_dict(ost);
    sync_weights(*policy, *gen);
    if (staging) sync_weights(*policy, *staging);
  }
  dataset->load_state(DatasetState::from_json(c.state.extra.at("dataset")));
  policy_version = c.state.extra.at("policy_version").get<int64_t>();
  start_step = c.state.step;
  if (print) fmt::print("resumed from {} (step {}, policy version {})\n", *latest, start_step, policy_version);
  return true;
}

std::map<std::string, int64_t> RLController::State::account_rollout_errors(const StepRollouts& b, int64_t done,
                                                                            RLResult* res, std::FILE* rollouts_log) {
  // Counted by reason every step; too many stop the run before an update is made
  // from them.
  const std::map<std::string, int64_t> errors = rollout_error_counts(b);
  int64_t n_errors = 0;
  std::string reasons;
  for (const auto& [reason, n] : errors) {
    n_errors += n;
    if (res) res->rollout_errors[reason] += n;
    reasons += fmt::format("{}{} x {}", reasons.empty() ? "" : "; ", n, reason);
  }
  if (res) res->rollouts += static_cast<int64_t>(b.all.size());
  if (n_errors > 0 && print) {
    fmt::print("step {:>4} | {} of {} rollouts failed: {}\n", done, n_errors, b.all.size(), reasons);
    std::fflush(stdout);
  }
  if (static_cast<double>(n_errors) > job.rl.max_error_fraction * static_cast<double>(b.all.size())) {
    log_rollouts(rollouts_log, b, done, gen_settings.rollout.group_size);
    fail("step {}: {} of {} rollouts failed, more than rl.max_error_fraction={}: {} (each one in {}/rollouts.jsonl)",
         done, n_errors, b.all.size(), job.rl.max_error_fraction, reasons, dump);
  }
  return errors;
}

json RLController::State::train_and_log(StepWork& work, int64_t step, const std::function<void()>& sync,
                                        RLResult& res, train::MetricsLogger& metrics, std::FILE* rollouts_log,
                                        bool stop_now) {
  StepRollouts& b = work.rollouts;
  const int64_t total = job.training.steps;
  const int64_t done = step + 1;
  const std::map<std::string, int64_t> errors = account_rollout_errors(b, done, &res, rollouts_log);
  int64_t n_errors = 0;
  for (const auto& e : errors) n_errors += e.second;
  // ---- train: forward, loss, backward, clip, AdamW step.
  auto t0 = Clock::now();
  std::vector<const TokenRollout*> kept;
  int64_t lag_max = 0;
  for (int64_t i : b.kept) {
    kept.push_back(&b.all[static_cast<size_t>(i)]);
    lag_max = std::max(lag_max, policy_version - b.all[static_cast<size_t>(i)].policy_version);
  }
  opt->zero_grad();
  const double lr = sched->lr(step, job.optimizer.lr);
  distributed::FullyShard* fsdp = ranks ? ranks->fsdp.get() : nullptr;
  DataParallelShare share;
  if (fsdp) share = {fsdp, &ranks->mesh->group(distributed::MeshDim::dp_shard), ranks->tp.get(), ranks->tp_comm.get()};
  PolicyUpdateStats us = policy_update_backward(*policy, ref.get(), kept, b.advantages, update_settings,
                                                fsdp ? &share : nullptr);
  double gnorm = 0;
  bool skipped = false;
  if (us.tokens > 0) {
    auto refs = opt->param_refs();
    if (share.tp)  // tp-sharded parameters summed over tp, replicated ones counted once
      gnorm = job.training.max_norm > 0 ? share.tp->clip_grad_norm_(refs, share.dp, job.training.max_norm)
                                        : share.tp->grad_norm(refs, share.dp);
    else if (fsdp)
      gnorm = job.training.max_norm > 0 ? fsdp->clip_grad_norm_(job.training.max_norm) : fsdp->grad_norm();
    else
      gnorm = job.training.max_norm > 0 ? optim::clip_grad_norm_(refs, job.training.max_norm) : optim::grad_norm(refs);
    skipped = !train::nonfinite_step_guard(step + 1, us.loss, gnorm, job.training.skip_nonfinite_steps);
    if (!skipped) {
      sched->apply(*opt, step);
      opt->step();
    }
  }
  opt->zero_grad();
  const double train_ms = ms_since(t0);
  policy_version = step + 1;
  // ---- weight sync: the new weights to the generator (sync mode) or its staging copy.
  auto ts = Clock::now();
  sync();
  const double sync_ms = ms_since(ts);
  const double step_ms = ms_since(last_step_end);  // wall time of the step as the trainer loop sees it

  // ---- metrics over every rollout generated for the step.
  const double n_all = static_cast<double>(std::max<size_t>(b.all.size(), 1));
  double rsum = 0, rsq = 0, lsum = 0;
  for (size_t i = 0; i < b.all.size(); ++i) {
    rsum += b.rewards[i];
    int64_t len = 0;
    for (const TurnTokens& t : b.all[i].turns) len += static_cast<int64_t>(t.completion_ids.size());
    lsum += static_cast<double>(len);
  }
  const double rmean = rsum / n_all;
  for (double r : b.rewards) rsq += (r - rmean) * (r - rmean);
  // Per advantage group (consecutive group_size rollouts): the best reward (best-of-n,
  // what sampling already finds) and whether all rewards are equal (no advantage).
  const size_t gsize = static_cast<size_t>(gen_settings.rollout.group_size);
  double best_sum = 0;
  int64_t n_groups = 0, flat_groups = 0;
  for (size_t g0 = 0; g0 + gsize <= b.rewards.size(); g0 += gsize, ++n_groups) {
    const auto [lo, hi] = std::minmax_element(b.rewards.begin() + static_cast<std::ptrdiff_t>(g0),
                                              b.rewards.begin() + static_cast<std::ptrdiff_t>(g0 + gsize));
    best_sum += *hi;
    flat_groups += *hi == *lo;
  }
  json row = {{"step", done},
              {"reward_mean", rmean},
              {"reward_std", std::sqrt(rsq / n_all)},
              {"reward_group_max_mean", n_groups > 0 ? best_sum / static_cast<double>(n_groups) : 0.0},
              {"zero_std_group_frac", n_groups > 0 ? static_cast<double>(flat_groups) / static_cast<double>(n_groups) : 0.0},
              {"response_len_mean", lsum / n_all},
              {"logprob_diff_max", us.logprob_diff_max},
              {"routing_mismatch_frac", us.routing_mismatch_frac},
              {"logprob_diff_mean", us.logprob_diff_mean},
              {"kl_gen_train", us.kl_gen_train},
              {"clip_frac", us.clip_frac},
              {"ratio_mean", us.ratio_mean},
              {"ratio_max", us.ratio_max},
              {"kl_ref", us.kl_ref_mean},
              {"entropy", us.entropy},
              {"loss", us.loss},
              {"grad_norm", gnorm},
              {"lr", lr},
              {"trained_tokens", us.tokens},
              {"microbatches", us.microbatches},
              {"rollouts", static_cast<int64_t>(b.all.size())},
              {"groups_dropped", b.groups_dropped},
              {"sampling_rounds", b.rounds},
              {"policy_version", policy_version},
              {"offpolicy_lag_max", lag_max},
              {"gen_tokens_per_s", b.gen_ms > 0 ? b.gen_tokens / (b.gen_ms / 1000.0) : 0.0},
              {"train_tokens_per_s", train_ms > 0 ? us.packed_tokens / (train_ms / 1000.0) : 0.0},
              {"gen_ms", b.gen_ms},
              {"tools_ms", b.tools_ms},
              {"score_ms", b.score_ms},
              {"train_ms", train_ms},
              {"sync_ms", sync_ms},
              {"step_ms", step_ms}};
  if (skipped) row["skipped_nonfinite"] = true;
  row["rollout_errors"] = n_errors;
  if (n_errors > 0) row["rollout_error_reasons"] = errors;
  res.logprob_diff_max = std::max(res.logprob_diff_max, us.logprob_diff_max);
  res.offpolicy_lag_max = std::max(res.offpolicy_lag_max, lag_max);
  const bool last = done == total;
  if (job.rl.val_freq > 0 && (done % job.rl.val_freq == 0 || last)) {
    auto tv = Clock::now();
    res.val_reward_final = validation(&row);
    row["val_reward"] = res.val_reward_final;
    row["val_ms"] = ms_since(tv);
  }
  row["rss_mb"] = train::rss_mb();
  row["peak_rss_mb"] = train::peak_rss_mb();
  log_rollouts(rollouts_log, b, done, gen_settings.rollout.group_size);
  // The row is written before the checkpoint of this step is published: a kill in
  // between leaves a row that the resume (truncate_jsonl_after) removes again.
  metrics.log(row);
  if (job.checkpoint.enable && (done % job.checkpoint.interval == 0 || last || stop_now))
    save_checkpoint(done, work.dataset_after);
  if (print && (done % job.metrics.log_freq == 0 || last || row.contains("val_reward"))) {
    fmt::print("step {:>4} | reward {:.3f} ± {:.3f} | len {:.1f} | logprob_diff_max {:.3g} | entropy {:.3f} | "
               "clip {:.3f} | grad_norm {:.3f} | lr {:.2e}{} | gen {:.0f} + score {:.0f} + train {:.0f} + sync {:.1f} ms"
               " | lag {}\n",
               done, rmean, std::sqrt(rsq / n_all), lsum / n_all, us.logprob_diff_max, us.entropy, us.clip_frac,
               gnorm, lr,
               row.contains("val_reward") ? fmt::format(" | val_reward {:.4f}", row["val_reward"].get<double>()) : "",
               b.gen_ms, b.score_ms, train_ms, sync_ms, lag_max);
    std::fflush(stdout);
  }
  res.steps_done = done;
  last_step_end = Clock::now();
  return row;
}

void RLController::State::run_sync(const RLRunOptions& o, RLResult& res, train::MetricsLogger& metrics,
                                   std::FILE* rollouts_log) {
  for (int64_t step = start_step; step < job.training.steps; ++step) {
    StepWork w;
    w.step = step;
    w.rollouts = collect_step_rollouts(*gen, *tok, *rollouter, *dataset, gen_settings, step, policy_version);
    w.dataset_after = dataset->state();
    const bool stop = stop_requested() || (o.stop_after_steps >= 0 && step + 1 >= o.stop_after_steps);
    train_and_log(w, step, [&] { sync_weights(*policy, *gen); }, res, metrics, rollouts_log, stop);
    if (stop && step + 1 < job.training.steps) {
      res.interrupted = true;
      break;
    }
  }
}

RLResult RLController::run(const RLRunOptions& o) {
  State& s = *st_;
  // Several ranks: rank 0 prints and writes metrics.jsonl and config.toml, the
  // generator rank writes rollouts.jsonl (distributed_controller.h).
  s.print = o.print && s.writes_metrics();
  RLResult res;
  res.dump_folder = s.dump;
  if (s.writes_metrics()) config::save_config(s.job);
  const bool resumed = s.try_resume();
  if (resumed) {
    if (s.writes_metrics()) truncate_jsonl_after(s.dump + "/metrics.jsonl", s.start_step);
    if (s.writes_rollouts()) truncate_jsonl_after(s.dump + "/rollouts.jsonl", s.start_step);
  }
  train::MetricsLogger metrics(s.dump + "/metrics.jsonl", resumed, s.job.metrics.jsonl && s.writes_metrics());
  if (s.job.metrics.enable_tensorboard && s.writes_metrics())
    metrics.enable_tensorboard(s.dump + "/" + s.job.metrics.save_tb_folder);
  std::FILE* rollouts_log = nullptr;
  if (s.writes_rollouts()) {
    rollouts_log = std::fopen((s.dump + "/rollouts.jsonl").c_str(), resumed ? "a" : "w");
    TITAN_CHECK(rollouts_log != nullptr, "titan rl: cannot open {}/rollouts.jsonl for writing", s.dump);
  }
  auto prev_int = std::signal(SIGINT, on_signal);
  auto prev_term = std::signal(SIGTERM, on_signal);
  g_signal.store(0);
  if (s.print) {
    const distributed::TensorParallel* tp = s.ranks ? s.ranks->tp.get() : nullptr;
    const auto& c = tp ? tp->full_config() : s.policy->config();  // the whole model's
    fmt::print("rl: env {} | {} {} params, {} layers, dim {}, vocab {} | init {} | {} | kernels {} | threads {}{}\n",
               s.rollouter->task().name, c.family, tp ? c.num_params() : s.policy->num_parameters(), c.num_hidden_layers,
               c.hidden_size, c.vocab_size,
               s.init_desc,
               s.job.rl.max_offpolicy_steps > 0 ? fmt::format("async (max_offpolicy_steps {})", s.job.rl.max_offpolicy_steps)
                                                : std::string("synchronous on-policy"),
               kernels::cpu::isa_name(kernels::cpu::cpu_isa()), num_threads(),
               s.ranks ? fmt::format(" | {} ranks: trainer FSDP dp_shard {}{} on ranks 0-{}, generator on rank {}",
                                     s.ranks->layout.world_size, s.ranks->layout.dp_shard,
                                     s.ranks->layout.tp > 1 ? fmt::format(" × TP {}", s.ranks->layout.tp) : "",
                                     s.ranks->layout.trainers - 1, s.ranks->generator_root())
                       : std::string());
    std::fflush(stdout);
  }
  try {
    if (!resumed && s.job.rl.val_freq > 0) {
      auto tv = Clock::now();
      json row0 = {{"step", 0}};
      res.val_reward_initial = res.val_reward_final = s.validation(&row0);
      row0["val_reward"] = res.val_reward_initial;
      row0["val_ms"] = ms_since(tv);
      metrics.log(row0);
      if (s.print) fmt::print("step {:>4} | val_reward {:.4f} (before any update)\n", 0, res.val_reward_initial);
    }
    s.last_step_end = Clock::now();
    if (s.ranks && s.ranks->is_generator())
      s.run_generator(o, res, rollouts_log);
    else if (s.ranks)
      s.run_trainer(o, res, metrics);
    else if (s.job.rl.max_offpolicy_steps > 0)
      s.run_async(o, res, metrics, rollouts_log);
    else
      s.run_sync(o, res, metrics, rollouts_log);
    if (s.ckpt) s.ckpt->wait();
  } catch (...) {
    if (rollouts_log) std::fclose(rollouts_log);
    std::signal(SIGINT, prev_int);
    std::signal(SIGTERM, prev_term);
    throw;
  }
  if (rollouts_log) std::fclose(rollouts_log);
  std::signal(SIGINT, prev_int);
  std::signal(SIGTERM, prev_term);
  return res;
}

int run_rl_job(const config::JobConfig& job) {
  auto t0 = Clock::now();
  RLController c(job);
  RLResult r = c.run();
  if (distributed::world()->rank() != 0) return r.interrupted ? 130 : 0;  // rank 0 prints the summary
  const double secs = ms_since(t0) / 1000.0;
  const auto reward = [](double v) { return std::isnan(v) ? std::string("n/a") : fmt::format("{:.4f}", v); };
  fmt::print("done: {} steps in {:.1f} s | val_reward {} -> {} | max logprob_diff_max {:.3g} | "
             "offpolicy_lag_max {}\n",
             r.steps_done, secs, reward(r.val_reward_initial), reward(r.val_reward_final), r.logprob_diff_max,
             r.offpolicy_lag_max);
  int64_t n_errors = 0;
  std::string reasons;
  for (const auto& [reason, n] : r.rollout_errors) {
    n_errors += n;
    reasons += fmt::format("{}{} x {}", reasons.empty() ? ": " : "; ", n, reason);
  }
  fmt::print("rollout errors: {} of {}{}\n", n_errors, r.rollouts, reasons);
  fmt::print("metrics: {}/metrics.jsonl | rollouts: {}/rollouts.jsonl\n", r.dump_folder, r.dump_folder);
  return r.interrupted ? 130 : 0;
}

}  // namespace titan::rl
