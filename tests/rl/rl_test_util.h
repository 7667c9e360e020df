// Shared set-up of the RL controller tests (rl_controller_test, rl_bf16_parity_test,
// rl_hybrid_test): the tiny random-init qwen3-style chat model over byte_chat tokens on
// alphabet_sort, a smooth reward that varies within groups (the share of lower-case
// letters; the random model answers with noise), and metrics.jsonl readers.
#pragma once
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/util/tiny_models.h"
#include "titan/config/job_config.h"
#include "titan/rl/controller.h"
#include "titan/rl/rubric.h"
#include "titan/rl/tasks.h"

namespace titan::rl::test_util {

namespace fs = std::filesystem;
using nlohmann::json;

inline config::JobConfig tiny_job(const fs::path& dump) {
  config::JobConfig c;
  c.job.dump_folder = dump.string();
  test::set_tiny_chat_qwen3(c.model);
  c.training.seq_len = 512;  // context of the random-init model (prompt + completion)
  c.training.steps = 4;
  c.training.seed = 7;
  c.optimizer.lr = 1e-3;
  c.lr_scheduler.warmup_steps = 0;
  c.lr_scheduler.decay_type = config::DecayType::constant;
  c.validation.enabled = false;
  c.generator.max_tokens = 12;
  c.generator.temperature = 1.0;
  c.generator.kv_cache_bytes = 16 << 20;
  c.generator.seed = 11;
  c.rl.env = "alphabet_sort";
  c.rl.env_config = R"({"num_samples": 512, "num_validation": 16, "max_names": 3})";
  c.rl.group_size = 4;
  c.rl.rollouts_per_step = 8;
  c.rl.val_freq = 2;
  c.rl.val_samples = 4;
  c.rl.microbatch_tokens = 600;  // several microbatches per step
  c.checkpoint.enable = false;
  c.metrics.log_freq = 100;
  return c;
}

inline double lower_share(const Rollout& r) {
  if (r.completions.empty() || r.completions[0].empty()) return 0.0;
  const std::string& s = r.completions[0];
  return static_cast<double>(std::count_if(s.begin(), s.end(), [](char ch) { return std::islower(static_cast<unsigned char>(ch)); })) /
         static_cast<double>(s.size());
}

inline TaskSpec smooth_task(const config::JobConfig& c, bool throwing = false) {
  TaskSpec t = make_task("alphabet_sort", json::parse(c.rl.env_config));
  std::vector<RewardFn> fns{{"lower_share", 1.0, lower_share}};
  if (throwing)
    fns.push_back({"broken", 0.5, [](const Rollout& r) -> double {
                     if (r.completions.empty() || r.completions[0].size() % 2 == 0)
                       throw std::runtime_error("reward service unavailable");
                     return 1.0;
                   }});
  t.rubric = Rubric(fns);
  return t;
}

inline std::vector<json> read_jsonl(const fs::path& p) {
  std::vector<json> rows;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) rows.push_back(json::parse(line));
  return rows;
}

inline std::vector<json> step_rows(const fs::path& dump) {
  std::vector<json> rows;
  for (json& r : read_jsonl(dump / "metrics.jsonl"))
    if (r["step"].get<int64_t>() > 0) rows.push_back(std::move(r));
  return rows;
}

inline json without_timings(const json& row) {
  json out = json::object();
  for (auto it = row.begin(); it != row.end(); ++it)
    if (!is_timing_metric(it.key())) out[it.key()] = it.value();
  return out;
}

}  // namespace titan::rl::test_util
