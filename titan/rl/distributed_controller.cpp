#include "titan/rl/distributed_controller.h"

#include <fmt/core.h>

#include <cstring>

#include "titan/autograd/node.h"
#include "titan/core/error.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/models/common/overrides.h"
#include "titan/rl/weight_sync.h"
#include "titan/train/trainer.h"

namespace titan::rl {

using nlohmann::json;

RLRanks resolve_rl_ranks(const config::JobConfig& job, int world_size) {
  const config::ParallelismConfig& p = job.parallelism;
  TITAN_CHECK(job.rl.num_generators == 1,
              "rl.num_generators={} is not supported: titan rl runs one generator (its own rank under mpirun)",
              job.rl.num_generators);
  for (auto [v, key] : {std::pair{p.data_parallel_replicate_degree, "data_parallel_replicate_degree"},
                        std::pair{p.pipeline_parallel_degree, "pipeline_parallel_degree"},
                        std::pair{p.context_parallel_degree, "context_parallel_degree"},
                        std::pair{p.expert_parallel_degree, "expert_parallel_degree"}})
    TITAN_CHECK(v == 1,
                "titan rl: parallelism.{}={} is not supported (the RL trainer runs FSDP over "
                "parallelism.data_parallel_shard_degree and tensor parallelism only)",
                key, v);
  RLRanks r;
  r.world_size = world_size;
  r.tp = p.tensor_parallel_degree;
  if (world_size == 1) {
    TITAN_CHECK(r.tp == 1,
                "titan rl: parallelism.tensor_parallel_degree={} on 1 rank (the trainer and the generator share it); "
                "launch with mpirun -np {} for {} tensor-parallel trainer ranks and a generator rank",
                r.tp, r.tp + 1, r.tp);
    TITAN_CHECK(p.data_parallel_shard_degree == 1 || p.data_parallel_shard_degree == -1,
                "titan rl: parallelism.data_parallel_shard_degree={} on 1 rank (the trainer and the generator share "
                "it); launch with mpirun -np {} for {} trainer ranks and a generator rank",
                p.data_parallel_shard_degree, p.data_parallel_shard_degree + 1, p.data_parallel_shard_degree);
    return r;
  }
  r.generators = job.rl.num_generators;
  r.trainers = world_size - r.generators;
  TITAN_CHECK(r.trainers >= 1, "titan rl on {} ranks: rl.num_generators={} leaves no trainer rank", world_size,
              r.generators);
  TITAN_CHECK(r.trainers % r.tp == 0,
              "titan rl on {} ranks: parallelism.tensor_parallel_degree={} does not divide the trainer's {} ranks "
              "(the world minus rl.num_generators={})",
              world_size, r.tp, r.trainers, r.generators);
  r.dp_shard = r.trainers / r.tp;
  if (r.tp == 1)
    TITAN_CHECK(p.data_parallel_shard_degree == -1 || p.data_parallel_shard_degree == r.trainers,
                "titan rl on {} ranks: parallelism.data_parallel_shard_degree={} must be -1 or the trainer's {} ranks "
                "(the world minus rl.num_generators={})",
                world_size, p.data_parallel_shard_degree, r.trainers, r.generators);
  else
    TITAN_CHECK(p.data_parallel_shard_degree == -1 || p.data_parallel_shard_degree == r.dp_shard,
                "titan rl on {} ranks: parallelism.data_parallel_shard_degree={} must be -1 or {} (the trainer's {} "
                "ranks / parallelism.tensor_parallel_degree={})",
                world_size, p.data_parallel_shard_degree, r.dp_shard, r.trainers, r.tp);
  TITAN_CHECK(r.tp == 1 || job.model.compute_dtype != config::ComputeDType::bf16,
              "model.compute_dtype=bf16 with parallelism.tensor_parallel_degree={} is not supported in titan rl: bf16 "
              "compute covers the trainer's forward on one rank or under FSDP",
              r.tp);
  TITAN_CHECK(job.rl.max_offpolicy_steps == 0,
              "titan rl on {} ranks: rl.max_offpolicy_steps={} is not supported (the generator rank runs synchronous "
              "on-policy steps; set it to 0)",
              world_size, job.rl.max_offpolicy_steps);
  TITAN_CHECK(r.trainers == 1 || job.optimizer.name != config::OptimizerName::muon,
              "optimizer.name=muon with {} FSDP trainer ranks is not supported (Muon orthogonalises whole matrices; "
              "FSDP holds row shards)",
              r.trainers);
  return r;
}

void check_rl_model(const models::TransformerConfig& cfg, const RLRanks& layout) {
  if (layout.tp == 1) return;
  for (auto [v, what] : {std::pair{cfg.num_attention_heads, "attention heads"},
                         std::pair{cfg.num_key_value_heads, "key/value heads"},
                         std::pair{cfg.intermediate_size, "FFN hidden width"},
                         std::pair{cfg.vocab_size, "vocabulary size"}})
    TITAN_CHECK(v % layout.tp == 0, "parallelism.tensor_parallel_degree={} does not divide the model's {} ({})",
                layout.tp, what, v);
  TITAN_CHECK(cfg.num_experts == 0,
              "titan rl: parallelism.tensor_parallel_degree={} with a mixture-of-experts model is not supported (the "
              "RL trainer's tensor parallelism covers dense layers)",
              layout.tp);
  distributed::TensorParallel::check_model(cfg, layout.tp, /*sequence_parallel=*/false, 0);
}

RankGroups::~RankGroups() = default;

// ---- the step's work as bytes

std::vector<uint8_t> encode_step_work(const StepWork& w, bool stop) {
  const StepRollouts& b = w.rollouts;
  json all = json::array();
  for (const TokenRollout& t : b.all) {
    json turns = json::array();
    for (const TurnTokens& u : t.turns)
      turns.push_back({{"prompt_ids", u.prompt_ids},
                       {"completion_ids", u.completion_ids},
                       {"logprobs", u.logprobs},
                       {"routed_experts", u.routed_experts},
                       {"finish_reason", u.finish_reason},
                       {"logprob_temperature", u.logprob_temperature},
                       {"seed", u.seed},
                       {"advantage_scale", u.advantage_scale}});
    json rewards = json::array();
    for (const RewardComponent& c : t.rollout.rewards)
      rewards.push_back({{"name", c.name}, {"weight", c.weight}, {"value", c.value}, {"error", c.error}});
    all.push_back({{"id", t.rollout.id},
                   {"status", static_cast<int>(t.rollout.status)},
                   {"failure_reason", t.rollout.failure_reason},
                   {"rewards", rewards},
                   {"total_reward", t.rollout.total_reward},
                   {"group", t.group},
                   {"policy_version", t.policy_version},
                   {"turns", turns}});
  }
  const json j = {{"step", w.step},
                  {"stop", stop},
                  {"dataset_after", w.dataset_after.to_json()},
                  {"all", all},
                  {"rewards", b.rewards},
                  {"kept", b.kept},
                  {"advantages", b.advantages},
                  {"groups_generated", b.groups_generated},
                  {"groups_dropped", b.groups_dropped},
                  {"rounds", b.rounds},
                  {"gen_tokens", b.gen_tokens},
                  {"gen_ms", b.gen_ms},
                  {"score_ms", b.score_ms},
                  {"tools_ms", b.tools_ms},
                  {"policy_version", b.policy_version},
                  {"samples_drawn", b.samples_drawn}};
  return json::to_cbor(j);
}

StepWork decode_step_work(const std::vector<uint8_t>& bytes, bool& stop) {
  StepWork w;
  try {
    const json j = json::from_cbor(bytes);
    w.step = j.at("step").get<int64_t>();
    stop = j.at("stop").get<bool>();
    w.dataset_after = DatasetState::from_json(j.at("dataset_after"));
    StepRollouts& b = w.rollouts;
    for (const json& r : j.at("all")) {
      TokenRollout t;
      t.rollout.id = r.at("id").get<std::string>();
      t.rollout.status = static_cast<RolloutStatus>(r.at("status").get<int>());
      t.rollout.failure_reason = r.at("failure_reason").get<std::string>();
      for (const json& c : r.at("rewards"))
        t.rollout.rewards.push_back({c.at("name").get<std::string>(), c.at("weight").get<double>(),
                                     c.at("value").get<double>(), c.at("error").get<std::string>()});
      t.rollout.total_reward = r.at("total_reward").get<double>();
      t.group = r.at("group").get<int64_t>();
      t.policy_version = r.at("policy_version").get<int64_t>();
      for (const json& u : r.at("turns")) {
        TurnTokens k;
        k.prompt_ids = u.at("prompt_ids").get<std::vector<int32_t>>();
        k.completion_ids = u.at("completion_ids").get<std::vector<int32_t>>();
        k.logprobs = u.at("logprobs").get<std::vector<float>>();
        k.routed_experts = u.at("routed_experts").get<std::vector<int32_t>>();
        k.finish_reason = u.at("finish_reason").get<std::string>();
        k.logprob_temperature = u.at("logprob_temperature").get<double>();
        k.seed = u.at("seed").get<uint64_t>();
        k.advantage_scale = u.at("advantage_scale").get<double>();
        t.turns.push_back(std::move(k));
      }
      b.all.push_back(std::move(t));
    }
    b.rewards = j.at("rewards").get<std::vector<double>>();
    b.kept = j.at("kept").get<std::vector<int64_t>>();
    b.advantages = j.at("advantages").get<std::vector<double>>();
    b.groups_generated = j.at("groups_generated").get<int64_t>();
    b.groups_dropped = j.at("groups_dropped").get<int64_t>();
    b.rounds = j.at("rounds").get<int64_t>();
    b.gen_tokens = j.at("gen_tokens").get<int64_t>();
    b.gen_ms = j.at("gen_ms").get<double>();
    b.score_ms = j.at("score_ms").get<double>();
    b.tools_ms = j.at("tools_ms").get<double>();
    b.policy_version = j.at("policy_version").get<int64_t>();
    b.samples_drawn = j.at("samples_drawn").get<int64_t>();
  } catch (const json::exception& e) {
    fail("titan rl: malformed step message from the generator rank ({} bytes): {}", bytes.size(), e.what());
  }
  TITAN_CHECK(w.rollouts.rewards.size() == w.rollouts.all.size() &&
                  w.rollouts.kept.size() == w.rollouts.advantages.size(),
              "titan rl: malformed step message from the generator rank: {} rollouts, {} rewards, {} kept, {} "
              "advantages",
              w.rollouts.all.size(), w.rollouts.rewards.size(), w.rollouts.kept.size(), w.rollouts.advantages.size());
  for (int64_t i : w.rollouts.kept)
    TITAN_CHECK(i >= 0 && i < static_cast<int64_t>(w.rollouts.all.size()),
                "titan rl: malformed step message from the generator rank: kept index {} of {} rollouts", i,
                w.rollouts.all.size());
  return w;
}

namespace {

// Bytes from `root` to every rank of `g`: the length, then the bytes.
std::vector<uint8_t> broadcast_message(distributed::ProcessGroup& g, std::vector<uint8_t> bytes, int root) {
  int64_t n = static_cast<int64_t>(bytes.size());
  g.broadcast_bytes(&n, sizeof n, root);
  bytes.resize(static_cast<size_t>(n));
  if (n > 0) g.broadcast_bytes(bytes.data(), bytes.size(), root);
  return bytes;
}

// The FSDP shard index of an optimizer state tensor "<parameter>.<state>" (exp_avg,
// exp_avg_sq, momentum_buffer: f32 with the parameter's rows), or -1 (the step counts).
int shard_of(const distributed::FullyShard& fs, const std::string& key, const Tensor& t) {
  const size_t dot = key.rfind('.');
  if (dot == std::string::npos || t.dtype() != DType::f32 || t.dim() == 0) return -1;
  for (size_t i = 0; i < fs.shards().size(); ++i)
    if (key.compare(0, dot, fs.shards()[i].first) == 0 && fs.shards()[i].first.size() == dot) return static_cast<int>(i);
  return -1;
}

// The parameter name of an optimizer state key "<parameter>.<state>" of the tp-local
// policy, or "" (not a parameter's state).
std::string param_of(const models::Decoder& m, const std::string& key) {
  const size_t dot = key.rfind('.');
  if (dot == std::string::npos) return {};
  for (const auto& [name, p] : m.named_parameters())
    if (name.size() == dot && key.compare(0, dot, name) == 0) return name;
  return {};
}

// A tp-local tensor (a parameter or its optimizer state, the piece's shape) -> the full
// model's tensor: the pieces of the tp ranks concatenated in rank order along the
// parameter's sharded dimension (replicated ones: this rank's copy). Collective over tp.
Tensor tp_full(const distributed::TensorParallel& tp, distributed::TpComm& c, const std::string& name,
               const Tensor& piece) {
  autograd::NoGradGuard ng;
  using P = distributed::TensorParallel::Placement;
  switch (tp.placement(name)) {
    case P::replicate: return piece;
    case P::shard_rows: return c.all_gather_rows(piece);
    case P::shard_cols: break;
  }
  return c.all_gather_rows(piece.transpose(0, 1).contiguous()).transpose(0, 1).contiguous();
}

// The full model's tensor -> this tp rank's piece of it (the inverse of tp_full).
Tensor tp_piece(const distributed::TensorParallel& tp, int rank, int size, const std::string& name,
                const Tensor& full) {
  using P = distributed::TensorParallel::Placement;
  switch (tp.placement(name)) {
    case P::replicate: return full;
    case P::shard_rows: return full.narrow(0, rank * (full.size(0) / size), full.size(0) / size).contiguous();
    case P::shard_cols: break;
  }
  return full.narrow(1, rank * (full.size(1) / size), full.size(1) / size).contiguous();
}

bool validation_due(const config::JobConfig& job, int64_t done) {
  return job.rl.val_freq > 0 && (done % job.rl.val_freq == 0 || done == job.training.steps);
}

}  // namespace

// ---- RLController::State's multi-rank parts

bool RLController::State::writes_metrics() const { return !ranks || ranks->rank == 0; }
bool RLController::State::writes_rollouts() const { return !ranks || ranks->is_generator(); }

void RLController::State::setup_ranks(const RLRanks& layout) {
  check_rl_model(policy->config(), layout);  // before any collective: the same error on every rank
  auto r = std::make_unique<RankGroups>();
  r->layout = layout;
  r->world = distributed::world();
  r->rank = r->world->rank();
  const bool gen_rank = r->is_generator();
  // Collective over the world, in the same order on every rank.
  r->trainers = std::shared_ptr<distributed::ProcessGroup>(r->world->split(gen_rank ? 1 : 0, r->rank));
  r->sync = r->world->split(r->rank == 0 || gen_rank ? 0 : -1, r->rank);
  if (gen_rank) {
    r->trainers.reset();
    opt.reset();
    ref.reset();  // the generator keeps `policy` (full, f32: the received weights) and `gen`
  } else {
    distributed::MeshShape shape;
    shape.dp_shard = layout.dp_shard;
    shape.tp = layout.tp;
    r->mesh = std::make_unique<distributed::DeviceMesh>(r->trainers, shape);
    if (layout.tp > 1) {
      // The policy becomes this rank's tp slice of the loaded full model (the same
      // weights on every rank), with the component overrides the full one runs.
      r->tp = std::make_unique<distributed::TensorParallel>(*r->mesh, policy->config(), /*sequence_parallel=*/false);
      r->tp_comm = std::make_unique<distributed::TpComm>(r->mesh->group(distributed::MeshDim::tp));
      const std::unique_ptr<models::Decoder> full = std::move(policy);
      policy = r->tp->build([&](models::Decoder& m) {
        autograd::NoGradGuard ng;
        auto src = full->named_parameters();
        auto dst = m.named_parameters();
        TITAN_CHECK(src.size() == dst.size(), "titan rl: the policy has {} parameters, its tensor-parallel model {}",
                    src.size(), dst.size());
        for (size_t i = 0; i < dst.size(); ++i) {
          TITAN_CHECK(src[i].first == dst[i].first && src[i].second.shape() == dst[i].second.shape(),
                      "titan rl: policy parameter {} is '{}' {}, '{}' {} in its tensor-parallel model", i,
                      src[i].first, shape_str(src[i].second.shape()), dst[i].first, shape_str(dst[i].second.shape()));
          dst[i].second.copy_(src[i].second);
        }
      });
      models::apply_overrides(*policy, job.model.overrides);
    }
    std::vector<std::pair<std::string, const nn::Module*>> blocks;
    for (size_t i = 0; i < policy->layers.size(); ++i) blocks.emplace_back("layers." + std::to_string(i), policy->layers[i]);
    r->fsdp = std::make_unique<distributed::FullyShard>(*policy, *r->mesh, blocks, nullptr,
                                                        job.parallelism.fsdp_reshard_after_forward != "never");
    opt = std::make_unique<optim::Optimizer>(optim::to_param_refs(r->fsdp->shards()),
                                             train::optimizer_config_from_job(job));
    gen.reset();
  }
  ranks = std::move(r);
}

double RLController::State::validation(json* row) {
  if (!ranks) return validate(row);
  json vals = json::object();
  double reward = 0;
  if (ranks->is_generator()) {
    reward = validate(&vals);
    vals["val_reward"] = reward;
  }
  const std::vector<uint8_t> bytes =
      broadcast_message(*ranks->world, ranks->is_generator() ? json::to_cbor(vals) : std::vector<uint8_t>{},
                        ranks->generator_root());
  if (!ranks->is_generator()) {
    vals = json::from_cbor(bytes);
    reward = vals.at("val_reward").get<double>();
  }
  vals.erase("val_reward");  // the caller sets it
  if (row)
    for (auto& [k, v] : vals.items()) (*row)[k] = v;
  return reward;
}

NamedTensorList RLController::State::full_policy_parameters() {
  distributed::FullyShard& fs = *ranks->fsdp;
  if (!ranks->tp) return fs.full_parameters();  // collective over dp_shard
  fs.unshard_all();  // the tp-local parameters, gathered over dp_shard
  NamedTensorList full = ranks->tp->full_parameters();  // then over tp
  fs.reshard_all();
  return full;
}

void RLController::State::send_weights() {
  const auto full = full_policy_parameters();  // collective over the trainer ranks
  if (!ranks->sync) return;
  size_t bytes = 0;
  for (const auto& [name, t] : full) bytes += t.nbytes();
  std::vector<unsigned char> buf(bytes);
  size_t off = 0;
  for (const auto& [name, t] : full) {
    const Tensor c = t.contiguous();
    std::memcpy(buf.data() + off, c.data_ptr(), c.nbytes());
    off += c.nbytes();
  }
  ranks->sync->broadcast_bytes(buf.data(), buf.size(), 0);
}

void RLController::State::receive_weights() {
  auto params = policy->named_parameters();
  size_t bytes = 0;
  for (const auto& [name, t] : params) bytes += t.nbytes();
  std::vector<unsigned char> buf(bytes);
  ranks->sync->broadcast_bytes(buf.data(), buf.size(), 0);
  size_t off = 0;
  autograd::NoGradGuard ng;
  for (auto& [name, t] : params) {
    std::memcpy(t.data_ptr(), buf.data() + off, t.nbytes());
    off += t.nbytes();
  }
  sync_weights(*policy, *gen);
}

void RLController::State::save_checkpoint_ranks(int64_t step, const DatasetState& ds) {
  // The 1-rank format: full tensors, gathered from the shards (collective over the
  // trainer ranks); trainer rank 0 writes.
  const NamedTensorList model = full_policy_parameters();
  distributed::ProcessGroup& shard = ranks->mesh->group(distributed::MeshDim::dp_shard);
  NamedTensorList optim_state;
  for (auto& [key, t] : opt->state_dict()) {
    if (shard_of(*ranks->fsdp, key, t) < 0) {
      optim_state.emplace_back(key, t);
      continue;
    }
    Tensor v = shard.all_gatherv(t);  // the tp-local rows
    if (ranks->tp) v = tp_full(*ranks->tp, *ranks->tp_comm, param_of(*policy, key), v);
    optim_state.emplace_back(key, v);
  }
  if (ranks->rank != 0) return;
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
  ckpt->save(model, optim_state, t);
}

void RLController::State::load_checkpoint_ranks(const LoadedCheckpoint& c) {
  if (ranks->is_generator()) {
    load_policy(c);
    sync_weights(*policy, *gen);
    return;
  }
  distributed::FullyShard& fs = *ranks->fsdp;
  // With tp > 1 this rank's tp piece of every full tensor first (FullyShard's "full"
  // tensors are the tp-local ones).
  const distributed::TensorParallel* tp = ranks->tp.get();
  const int tp_rank = tp ? ranks->tp_comm->rank() : 0, tp_size = tp ? ranks->tp_comm->size() : 1;
  std::vector<std::pair<std::string, Tensor>> full;
  for (const auto& [name, t] : c.model) full.emplace_back(name, tp ? tp_piece(*tp, tp_rank, tp_size, name, t) : t);
  fs.load_full_parameters(full);
  // Optimizer tensors "<param>.<state>" hold the full rows: this rank's are its shard's.
  optim::NamedTensors ost;
  for (const auto& [key, t0] : c.optimizer) {
    Tensor t = t0;
    if (tp && shard_of(fs, key, t0) >= 0) t = tp_piece(*tp, tp_rank, tp_size, param_of(*policy, key), t0);
    Tensor v = t;
    if (const int i = shard_of(fs, key, t); i >= 0) {
      TITAN_CHECK(t.shape() == fs.full_shape(i), "checkpoint {}: '{}' has shape {}, the model expects {}", c.path, key,
                  shape_str(t.shape()), shape_str(fs.full_shape(i)));
      const distributed::ShardRange rows = fs.shard_rows(i);
      v = t.narrow(0, rows.offset, rows.length).contiguous().clone();
    }
    ost.emplace_back(key, v);
  }
  opt->load_state_dict(ost);
}

void RLController::State::run_generator(const RLRunOptions& o, RLResult& res, std::FILE* rollouts_log) {
  for (int64_t step = start_step; step < job.training.steps; ++step) {
    StepWork w;
    w.step = step;
    w.rollouts = collect_step_rollouts(*gen, *tok, *rollouter, *dataset, gen_settings, step, policy_version);
    w.dataset_after = dataset->state();
    const bool stop = stop_requested() || (o.stop_after_steps >= 0 && step + 1 >= o.stop_after_steps);
    broadcast_message(*ranks->world, encode_step_work(w, stop), ranks->generator_root());
    const int64_t done = step + 1;
    // The trainers make the same check on the same rollouts and fail with the same error.
    account_rollout_errors(w.rollouts, done, &res, rollouts_log);
    log_rollouts(rollouts_log, w.rollouts, done, gen_settings.rollout.group_size);
    receive_weights();
    policy_version = done;
    if (validation_due(job, done)) res.val_reward_final = validation(nullptr);
    res.steps_done = done;
    if (stop && done < job.training.steps) {
      res.interrupted = true;
      break;
    }
  }
}

void RLController::State::run_trainer(const RLRunOptions&, RLResult& res, train::MetricsLogger& metrics) {
  for (int64_t step = start_step; step < job.training.steps; ++step) {
    bool stop = false;
    StepWork w = decode_step_work(broadcast_message(*ranks->world, {}, ranks->generator_root()), stop);
    TITAN_CHECK(w.step == step, "titan rl: the generator rank sent step {} while the trainer is at step {}",
                w.step + 1, step + 1);
    train_and_log(w, step, [&] { send_weights(); }, res, metrics, nullptr, stop);
    if (stop && step + 1 < job.training.steps) {
      res.interrupted = true;
      break;
    }
  }
}

}  // namespace titan::rl
