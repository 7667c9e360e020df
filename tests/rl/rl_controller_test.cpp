// The RL controller end to end on a tiny qwen3-style model over byte_chat tokens and
// the alphabet_sort task (the RL acceptance checks, at test size):
//   - logprob_diff_max == 0.0 at every step (generator and trainer agree bitwise);
//   - model.overrides run in the trainer and in the generator, parity still exact;
//   - a generator-only parity break (--generator.kv_block_size 16 vs the trainer's
//     attention block 32) makes it > 0: the metric is live;
//   - stop + resume gives bitwise-identical metrics to an uninterrupted run;
//   - async mode (max_offpolicy_steps 1) never trains on rollouts older than the bound;
//   - a reward function that throws and completions cut at max_tokens give reward 0
//     with the reason in rollouts.jsonl, and the run continues.
// The tiny random-init model answers with noise, so the tests replace the rubric
// with a smooth reward (share of lower-case letters) that varies within groups and
// gives real gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "tests/util/test_files.h"
#include "tests/rl/rl_test_util.h"
#include "tests/util/tiny_models.h"
#include "titan/config/job_config.h"
#include "titan/core/error.h"
#include "titan/models/common/overrides.h"
#include "titan/rl/controller.h"
#include "titan/rl/tasks.h"

namespace titan::rl {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path fresh_dir(const std::string& name) { return test::fresh_dir("rl_controller_" + name); }

using namespace test_util;

TEST(RLController, LogprobDiffIsExactlyZeroEveryStep) {
  const fs::path dump = fresh_dir("parity");
  const config::JobConfig c = tiny_job(dump);
  RLController ctl(c, smooth_task(c));
  const RLResult r = ctl.run({.print = false});
  EXPECT_EQ(r.steps_done, 4);
  EXPECT_EQ(r.logprob_diff_max, 0.0);
  const auto rows = step_rows(dump);
  ASSERT_EQ(rows.size(), 4u);
  double reward_std = 0, grad = 0;
  for (const json& row : rows) {
    EXPECT_EQ(row["logprob_diff_max"].get<double>(), 0.0) << row.dump();
    EXPECT_EQ(row["logprob_diff_mean"].get<double>(), 0.0);
    EXPECT_EQ(row["kl_gen_train"].get<double>(), 0.0);
    EXPECT_EQ(row["offpolicy_lag_max"].get<int64_t>(), 0);
    EXPECT_GT(row["trained_tokens"].get<int64_t>(), 0);
    EXPECT_GT(row["entropy"].get<double>(), 0.0);
    EXPECT_EQ(row["rollouts"].get<int64_t>(), 8);
    for (const char* k : {"reward_mean", "reward_std", "response_len_mean", "clip_frac", "grad_norm", "lr",
                          "gen_tokens_per_s", "train_tokens_per_s", "step_ms", "gen_ms", "score_ms", "train_ms",
                          "sync_ms", "policy_version"})
      EXPECT_TRUE(row.contains(k)) << k;
    reward_std += row["reward_std"].get<double>();
    grad += row["grad_norm"].get<double>();
    // Best-of-group: each group's maximum is >= its mean, so their mean is >= reward_mean
    // (equal-size groups), and > it as soon as one group is not flat.
    EXPECT_GE(row["reward_group_max_mean"].get<double>(), row["reward_mean"].get<double>()) << row.dump();
    EXPECT_LE(row["reward_group_max_mean"].get<double>(), 1.0);
    EXPECT_GE(row["zero_std_group_frac"].get<double>(), 0.0);
    EXPECT_LE(row["zero_std_group_frac"].get<double>(), 1.0);
    if (row["zero_std_group_frac"].get<double>() < 1.0) {
      EXPECT_GT(row["reward_group_max_mean"].get<double>(), row["reward_mean"].get<double>()) << row.dump();
    }
  }
  EXPECT_GT(reward_std, 0.0);  // the test reward varies: real gradients
  EXPECT_GT(grad, 0.0);
  EXPECT_EQ(rows.back()["policy_version"].get<int64_t>(), 4);
  // val_reward at step 0, step 2 and the last step.
  int vals = 0;
  for (const json& row : read_jsonl(dump / "metrics.jsonl")) vals += row.contains("val_reward");
  EXPECT_EQ(vals, 3);
  EXPECT_GE(r.val_reward_initial, 0.0);
  // rollouts.jsonl: at least the first rollout of each group of each step.
  const auto logged = read_jsonl(dump / "rollouts.jsonl");
  EXPECT_GE(logged.size(), 4u * 2u);
  for (const json& l : logged)
    for (const char* k : {"step", "prompt", "completion", "reward", "status", "failure_reason"})
      EXPECT_TRUE(l.contains(k)) << k;
}

TEST(RLController, GeneratorOnlyParityBreakShowsInLogprobDiff) {
  const fs::path dump = fresh_dir("break");
  config::JobConfig c = tiny_job(dump);
  c.training.steps = 1;
  c.rl.val_freq = 0;
  c.generator.kv_block_size = 16;  // trainer attention keeps its 32-key blocks
  RLController ctl(c, smooth_task(c));
  const RLResult r = ctl.run({.print = false});
  EXPECT_GT(r.logprob_diff_max, 0.0);
  EXPECT_LT(r.logprob_diff_max, 1e-3);  // rounding-level, not a bug-level gap
  const auto rows = step_rows(dump);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_GT(rows[0]["logprob_diff_max"].get<double>(), 0.0);
}

// model.overrides reach the policy and its generator copy: the generator's decode steps
// run the composed SwiGLU (at least max_tokens steps x layers forwards through it, more
// than the trainer's few microbatches could make), parity stays exact, and config.toml
// records the resolved entries.
TEST(RLController, OverridesRunInTrainerAndGenerator) {
  const fs::path dump = fresh_dir("overrides");
  config::JobConfig c = tiny_job(dump);
  c.training.steps = 1;
  c.rl.val_freq = 0;
  c.model.overrides = {"swiglu=composed", "rope=composed:layers.0.*"};
  const int64_t before = models::override_calls("swiglu", "composed");
  RLController ctl(c, smooth_task(c));
  const RLResult r = ctl.run({.print = false});
  EXPECT_EQ(r.logprob_diff_max, 0.0);
  EXPECT_GE(models::override_calls("swiglu", "composed") - before, c.generator.max_tokens * c.model.n_layers);
  EXPECT_NE(test::file_bytes((dump / "config.toml").string())
                .find(R"(overrides = ["swiglu=composed:*", "rope=composed:layers.0.*"])"),
            std::string::npos);
}

TEST(RLController, StopAndResumeGivesBitwiseIdenticalMetrics) {
  const fs::path a = fresh_dir("uninterrupted"), b = fresh_dir("resumed");
  config::JobConfig ca = tiny_job(a), cb = tiny_job(b);
  for (config::JobConfig* c : {&ca, &cb}) {
    c->checkpoint.enable = true;
    c->checkpoint.interval = 2;
  }
  {
    RLController ctl(ca, smooth_task(ca));
    ctl.run({.print = false});
  }
  {
    RLController ctl(cb, smooth_task(cb));
    const RLResult r = ctl.run({.stop_after_steps = 2, .print = false});
    EXPECT_TRUE(r.interrupted);
    EXPECT_EQ(r.steps_done, 2);
  }
  {
    RLController ctl(cb, smooth_task(cb));  // a new process would do the same
    const RLResult r = ctl.run({.print = false});
    EXPECT_FALSE(r.interrupted);
    EXPECT_EQ(r.steps_done, 4);
  }
  const auto ra = read_jsonl(a / "metrics.jsonl"), rb = read_jsonl(b / "metrics.jsonl");
  ASSERT_EQ(ra.size(), rb.size());
  for (size_t i = 0; i < ra.size(); ++i)
    EXPECT_EQ(without_timings(ra[i]), without_timings(rb[i])) << "row " << i;
}

TEST(RLController, AsyncModeKeepsTheLagBound) {
  const fs::path dump = fresh_dir("async");
  config::JobConfig c = tiny_job(dump);
  c.rl.max_offpolicy_steps = 1;
  c.training.steps = 5;
  c.rl.val_freq = 0;
  RLController ctl(c, smooth_task(c));
  const RLResult r = ctl.run({.print = false});
  EXPECT_EQ(r.steps_done, 5);
  EXPECT_LE(r.offpolicy_lag_max, 1);
  const auto rows = step_rows(dump);
  ASSERT_EQ(rows.size(), 5u);
  int64_t lag_seen = 0;
  for (const json& row : rows) {
    EXPECT_LE(row["offpolicy_lag_max"].get<int64_t>(), 1);
    lag_seen = std::max(lag_seen, row["offpolicy_lag_max"].get<int64_t>());
    // Rollouts of the current policy are bitwise on-policy; stale ones are not.
    if (row["offpolicy_lag_max"].get<int64_t>() == 0) {
      EXPECT_EQ(row["logprob_diff_max"].get<double>(), 0.0);
    }
  }
  EXPECT_EQ(lag_seen, 1);  // generation really overlapped training
  // The first step is trained on version-0 rollouts with version-0 weights.
  EXPECT_EQ(rows[0]["logprob_diff_max"].get<double>(), 0.0);
}

TEST(RLController, FailingRewardAndTruncatedCompletionsScoreZeroAndTheRunContinues) {
  const fs::path dump = fresh_dir("bad");
  config::JobConfig c = tiny_job(dump);
  c.training.steps = 2;
  c.rl.val_freq = 0;
  c.generator.max_tokens = 5;  // cut every noisy completion mid-way (no closing tag)
  c.rl.max_error_fraction = 1.0;  // the throwing reward fails about half of them: keep going
  RLController ctl(c, smooth_task(c, /*throwing=*/true));
  const RLResult r = ctl.run({.print = false});
  EXPECT_EQ(r.steps_done, 2);
  const auto logged = read_jsonl(dump / "rollouts.jsonl");
  int threw = 0, cut = 0;
  for (const json& l : logged) {
    if (!l["reward_errors"].empty()) {
      ++threw;
      EXPECT_NE(l["reward_errors"][0].get<std::string>().find("reward service unavailable"), std::string::npos);
    }
    if (l["status"] == "truncated_length") {
      ++cut;
      EXPECT_NE(l["failure_reason"].get<std::string>().find("max_tokens"), std::string::npos);
    }
  }
  EXPECT_GT(threw, 0);
  EXPECT_GT(cut, 0);
  // The real alphabet_sort reward of a completion cut before its closing tag is 0.
  const TaskSpec real = make_task("alphabet_sort", json::parse(c.rl.env_config));
  Rollout ro;
  ro.sample = real.train->get(0);
  ro.completions = {"<alphabetical_sorted>\nAnna"};
  ro.finish_reasons = {"length"};
  ro.status = RolloutStatus::truncated_length;
  real.rubric.score(ro);
  EXPECT_EQ(ro.total_reward, 0.0);
}

TEST(RLController, BadConfigIsAClearError) {
  const fs::path dump = fresh_dir("badcfg");
  config::JobConfig c = tiny_job(dump);
  c.rl.env_config = "{not json";
  try {
    RLController ctl(c);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rl.env_config"), std::string::npos) << e.what();
  }
  c.rl.env_config = "";
  c.rl.init_from = (dump / "missing").string();
  EXPECT_THROW(RLController ctl(c), Error);
}

}  // namespace
}  // namespace titan::rl
