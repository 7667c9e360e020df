// RL in bf16 compute (model.compute_dtype = bf16): the trainer and the generator both
// run the bf16 path (titan/ops/bf16_compute.h), and their logprobs agree bitwise at
// every step (logprob_diff_max == 0.0), on the tiny qwen3-style model and the
// alphabet_sort task of rl_controller_test.cpp (same set-up, smooth reward). A run
// in fp32 with the same seeds gives different losses (bf16 is in effect).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "titan/config/job_config.h"
#include "titan/core/error.h"
#include "titan/rl/controller.h"
#include "titan/rl/tasks.h"

namespace titan::rl {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("titan_rl_bf16_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

config::JobConfig tiny_job(const fs::path& dump) {
  config::JobConfig c;
  c.job.dump_folder = dump.string();
  c.model.name = "qwen3";
  c.model.tokenizer_path = "byte_chat";
  c.model.vocab_size = 0;
  c.model.dim = 64;
  c.model.n_layers = 2;
  c.model.n_heads = 4;
  c.model.n_kv_heads = 2;
  c.model.head_dim = 16;
  c.model.ffn_hidden_dim = 128;
  c.model.qk_norm = true;
  c.model.tie_embeddings = true;
  c.model.norm_eps = 1e-6;
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

double lower_share(const Rollout& r) {
  if (r.completions.empty() || r.completions[0].empty()) return 0.0;
  const std::string& s = r.completions[0];
  return static_cast<double>(std::count_if(s.begin(), s.end(), [](char ch) { return std::islower(static_cast<unsigned char>(ch)); })) /
         static_cast<double>(s.size());
}

TaskSpec smooth_task(const config::JobConfig& c, bool throwing = false) {
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

std::vector<json> read_jsonl(const fs::path& p) {
  std::vector<json> rows;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) rows.push_back(json::parse(line));
  return rows;
}

std::vector<json> step_rows(const fs::path& dump) {
  std::vector<json> rows;
  for (json& r : read_jsonl(dump / "metrics.jsonl"))
    if (r["step"].get<int64_t>() > 0) rows.push_back(std::move(r));
  return rows;
}

json without_timings(const json& row) {
  json out = json::object();
  for (auto it = row.begin(); it != row.end(); ++it)
    if (!is_timing_metric(it.key())) out[it.key()] = it.value();
  return out;
}

TEST(RLBf16, LogprobDiffIsExactlyZeroEveryStep) {
  const fs::path dump = fresh_dir("bf16");
  config::JobConfig c = tiny_job(dump);
  c.training.steps = 3;
  c.rl.val_freq = 0;
  c.model.compute_dtype = config::ComputeDType::bf16;
  RLController ctl(c, smooth_task(c));
  const RLResult r = ctl.run({.print = false});
  EXPECT_EQ(r.steps_done, 3);
  EXPECT_EQ(r.logprob_diff_max, 0.0);
  const auto rows = step_rows(dump);
  ASSERT_EQ(rows.size(), 3u);
  for (const json& row : rows) EXPECT_EQ(row["logprob_diff_max"].get<double>(), 0.0) << row.dump();

  const fs::path dump32 = fresh_dir("f32");
  config::JobConfig c32 = c;
  c32.job.dump_folder = dump32.string();
  c32.model.compute_dtype = config::ComputeDType::f32;
  RLController ctl32(c32, smooth_task(c32));
  ctl32.run({.print = false});
  const auto rows32 = step_rows(dump32);
  ASSERT_EQ(rows32.size(), 3u);
  bool differ = false;
  for (size_t i = 0; i < rows.size(); ++i)
    differ |= rows[i]["grad_norm"].get<double>() != rows32[i]["grad_norm"].get<double>();
  EXPECT_TRUE(differ) << "bf16 and fp32 runs gave identical grad norms: " << rows[0].dump() << " vs "
                      << rows32[0].dump();
  fs::remove_all(dump.parent_path());
}

}  // namespace
}  // namespace titan::rl
