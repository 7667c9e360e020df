// Rollouter benchmark on the alphabet_sort SFT model: greedy validation reward (the
// number RL starts from) and sampled rollout groups through the engine, 2 threads.
// Needs a finished `titan train --recipe alphabet_sort_sft` run; results in
// docs/benchmarks-history.md, "RL rollouter + SFT".
//
//   build-*/titan train --recipe alphabet_sort_sft
//   build-*/bench/rl_rollout_bench [--benchmark_filter=...]
//   TITAN_SFT_DIR=outputs/alphabet_sort_sft (default): the run's dump folder; its
//   config.toml gives the task (training.task, training.task_config), hf/ the model.
//
// Benchmarks (one iteration each; tok/s = generated tokens per second of wall time):
//   ValidationReward/n   greedy, one episode per validation sample (the first n):
//                        counters reward_mean, completed (fraction), gen_tok/s.
//   Rollouts/G/g         G samples x group g at temperature 1 (seeded): reward_mean,
//                        reward_std, gen_tok/s, turns (completions generated).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "titan/config/job_config.h"
#include "titan/config/toml_io.h"
#include "titan/infer/engine.h"
#include "titan/infer/model_loader.h"
#include "titan/rl/rollouter.h"

namespace {

using namespace titan;

struct Setup {
  infer::LoadedModel model;
  std::unique_ptr<rl::Rollouter> rollouter;
  config::JobConfig job;
};

Setup* setup() {
  static std::unique_ptr<Setup> s = [] {
    const char* env = std::getenv("TITAN_SFT_DIR");
    const std::string dir = env ? env : "outputs/alphabet_sort_sft";
    auto out = std::make_unique<Setup>();
    config::apply_toml_file(out->job, dir + "/config.toml");
    out->model = infer::load_hf_model(dir + "/hf");
    nlohmann::json cfg = nlohmann::json::object();
    if (!out->job.training.task_config.empty()) cfg = nlohmann::json::parse(out->job.training.task_config);
    out->rollouter = std::make_unique<rl::Rollouter>(rl::make_task(out->job.training.task, cfg), *out->model.tokenizer);
    std::printf("model: %s\ntask: %s %s\n", out->model.description.c_str(), out->job.training.task.c_str(),
                out->job.training.task_config.c_str());
    return out;
  }();
  return s.get();
}

infer::EngineConfig engine_config() {
  infer::EngineConfig ec;
  ec.kv_cache_bytes = int64_t{256} << 20;
  ec.max_num_seqs = 128;
  ec.max_num_batched_tokens = 4096;
  return ec;
}

int64_t generated(const std::vector<rl::TokenRollout>& rs, int64_t& turns) {
  int64_t n = 0;
  for (const auto& r : rs)
    for (const auto& t : r.turns) {
      n += static_cast<int64_t>(t.completion_ids.size());
      ++turns;
    }
  return n;
}

void BM_ValidationReward(benchmark::State& state) {
  Setup* s = setup();
  rl::ValidationResult v;
  int64_t tokens = 0, turns = 0;
  for (auto _ : state) {
    infer::Engine engine(*s->model.model, s->model.tokenizer.get(), engine_config());
    v = rl::validation_reward(engine, *s->rollouter, state.range(0), {.max_turns = s->rollouter->task().max_turns},
                              128);
    tokens = generated(v.rollouts, turns);
  }
  int64_t completed = 0;
  for (const auto& r : v.rollouts) completed += r.rollout.status == rl::RolloutStatus::completed;
  if (std::getenv("TITAN_SHOW"))  // a few rollouts, to see what the model writes
    for (size_t i = 0; i < v.rollouts.size() && i < 4; ++i)
      std::printf("--- %s reward %.3f %s\n%s\n", v.rollouts[i].rollout.sample.id.c_str(),
                  v.rollouts[i].rollout.total_reward, std::string(rl::to_string(v.rollouts[i].rollout.status)).c_str(),
                  v.rollouts[i].rollout.to_json().dump(1).c_str());
  state.counters["reward_mean"] = v.reward_mean;
  state.counters["episodes"] = static_cast<double>(v.episodes);
  state.counters["completed"] = static_cast<double>(completed) / static_cast<double>(v.episodes);
  state.counters["gen_tok/s"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ValidationReward)->Arg(64)->Arg(256)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Rollouts(benchmark::State& state) {
  Setup* s = setup();
  std::vector<rl::TaskSample> samples;
  for (int64_t i = 0; i < state.range(0); ++i) samples.push_back(s->rollouter->task().train->get(i));
  rl::RolloutConfig rc;
  rc.group_size = state.range(1);
  rc.sampling.temperature = 1.0;
  rc.sampling.max_tokens = 128;
  rc.sampling.seed = 42;
  rc.limits.max_turns = s->rollouter->task().max_turns;
  std::vector<rl::TokenRollout> out;
  int64_t tokens = 0, turns = 0;
  for (auto _ : state) {
    infer::Engine engine(*s->model.model, s->model.tokenizer.get(), engine_config());
    out = s->rollouter->run(engine, samples, rc, 0);
    turns = 0;
    tokens = generated(out, turns);
  }
  double sum = 0, sq = 0;
  for (const auto& r : out) sum += r.rollout.total_reward;
  const double mean = sum / static_cast<double>(out.size());
  for (const auto& r : out) sq += (r.rollout.total_reward - mean) * (r.rollout.total_reward - mean);
  state.counters["reward_mean"] = mean;
  state.counters["reward_std"] = std::sqrt(sq / static_cast<double>(out.size()));
  state.counters["turns"] = static_cast<double>(turns);
  state.counters["gen_tok/s"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Rollouts)->Args({8, 8})->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
