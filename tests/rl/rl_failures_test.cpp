// RL runs whose rollouts fail must not end quietly with reward 0:
//   - every rollout failing (a model context shorter than every prompt) stops the run
//     with an error naming the step, the count and the reason;
//   - failures below rl.max_error_fraction are counted by reason in every metrics row
//     (rollout_errors, rollout_error_reasons) and in RLResult, and the run goes on;
//   - rl.max_error_fraction=0 stops at the first failed rollout.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/util/test_files.h"
#include "titan/core/error.h"
#include "titan/rl/controller.h"
#include "titan/rl/rubric.h"
#include "titan/rl/tasks.h"

namespace titan::rl {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path fresh_dir(const std::string& name) { return test::fresh_dir("rl_failures_" + name); }

config::JobConfig tiny_job(const fs::path& dump) {
  config::JobConfig c;
  c.job.dump_folder = dump.string();
  c.model.name = "qwen3";
  c.model.tokenizer_path = "byte_chat";
  c.model.dim = 32;
  c.model.n_layers = 1;
  c.model.n_heads = 2;
  c.model.head_dim = 16;
  c.model.ffn_hidden_dim = 64;
  c.training.seq_len = 512;
  c.training.steps = 2;
  c.lr_scheduler.warmup_steps = 0;
  c.lr_scheduler.decay_type = config::DecayType::constant;
  c.validation.enabled = false;
  c.generator.max_tokens = 6;
  c.generator.kv_cache_bytes = 8 << 20;
  c.rl.env = "alphabet_sort";
  c.rl.env_config = R"({"num_samples": 64, "num_validation": 4, "max_names": 3})";
  c.rl.group_size = 4;
  c.rl.rollouts_per_step = 8;
  c.rl.val_freq = 0;
  c.checkpoint.enable = false;
  return c;
}

std::vector<json> read_jsonl(const fs::path& p) {
  std::vector<json> rows;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) rows.push_back(json::parse(line));
  return rows;
}

TEST(RLFailures, EveryRolloutFailingStopsTheRunWithTheReason) {
  const fs::path dump = fresh_dir("all_fail");
  config::JobConfig c = tiny_job(dump);
  c.training.seq_len = 16;  // the random-init model's context: 64 positions, shorter than every prompt
  RLController ctl(c);
  try {
    ctl.run({.print = false});
    FAIL() << "the run ended normally";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("step 1: 8 of 8 rollouts failed"), std::string::npos) << m;
    EXPECT_NE(m.find("rl.max_error_fraction"), std::string::npos) << m;
    EXPECT_NE(m.find("8 x "), std::string::npos) << m;  // one reason, all eight
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  // No metrics row claims a trained step; the failed rollouts are in rollouts.jsonl.
  for (const json& r : read_jsonl(dump / "metrics.jsonl")) EXPECT_FALSE(r.contains("loss")) << r.dump();
  const auto logged = read_jsonl(dump / "rollouts.jsonl");
  ASSERT_EQ(logged.size(), 8u);
  for (const json& l : logged) EXPECT_EQ(l["status"], "error") << l.dump();
}

TaskSpec half_broken_task(const config::JobConfig& c) {
  TaskSpec t = make_task("alphabet_sort", json::parse(c.rl.env_config));
  std::vector<RewardFn> fns{{"broken", 1.0, [](const Rollout& r) -> double {
                               if (r.completions.empty() || r.completions[0].size() % 2 == 0)
                                 throw std::runtime_error("reward service unavailable (attempt 3)");
                               return 1.0;
                             }}};
  t.rubric = Rubric(fns);
  return t;
}

TEST(RLFailures, FailuresBelowTheShareAreCountedByReason) {
  const fs::path dump = fresh_dir("some_fail");
  config::JobConfig c = tiny_job(dump);
  c.rl.max_error_fraction = 1.0;
  RLController ctl(c, half_broken_task(c));
  const RLResult r = ctl.run({.print = false});
  EXPECT_EQ(r.steps_done, 2);
  EXPECT_EQ(r.rollouts, 16);
  int64_t total = 0;
  for (const json& row : read_jsonl(dump / "metrics.jsonl")) {
    ASSERT_TRUE(row.contains("rollout_errors")) << row.dump();
    const int64_t n = row["rollout_errors"].get<int64_t>();
    total += n;
    if (n > 0) {
      // Digits are folded, so every "attempt 3" failure is one reason.
      ASSERT_EQ(row["rollout_error_reasons"].size(), 1u) << row.dump();
      EXPECT_EQ(row["rollout_error_reasons"].begin().key(),
                "reward broken: threw: reward service unavailable (attempt N)");
    }
  }
  EXPECT_GT(total, 0);
  ASSERT_EQ(r.rollout_errors.size(), 1u);
  EXPECT_EQ(r.rollout_errors.begin()->second, total);
}

TEST(RLFailures, ZeroShareStopsAtTheFirstFailure) {
  const fs::path dump = fresh_dir("zero_share");
  config::JobConfig c = tiny_job(dump);
  c.rl.max_error_fraction = 0.0;
  RLController ctl(c, half_broken_task(c));
  EXPECT_THROW(ctl.run({.print = false}), Error);
}

}  // namespace
}  // namespace titan::rl
