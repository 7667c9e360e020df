// The RL controller on a hybrid linear-attention policy (Qwen3-Next layout: 3 Gated
// DeltaNet layers + 1 gated attention layer, from an HF config.json) over byte_chat
// tokens and the alphabet_sort task:
//   - logprob_diff_max == 0.0 at every step: the generator decodes the GDN layers from its
//     state slots (prefix snapshots for the group's samples) with the trainer's bits;
//   - a generator-only parity break (generator.kv_block_size 16 vs the trainer's attention
//     block 32) makes it > 0: the metric is live for hybrids too.
// The reward is the share of lower-case letters (the random-init model answers noise), so
// it varies within groups and gives real gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/rl/rl_test_util.h"
#include "titan/config/job_config.h"
#include "titan/rl/controller.h"
#include "titan/rl/tasks.h"

namespace titan::rl {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("titan_rl_hybrid_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

config::JobConfig hybrid_job(const fs::path& dump) {
  // recipes/alphabet_sort_hybrid.json shrunk: dim 64, heads 4/2 of 16, linear heads 2/4 of 16.
  std::ifstream in(std::string(TITAN_SOURCE_DIR) + "/recipes/alphabet_sort_hybrid.json");
  json hf = json::parse(in);
  hf["hidden_size"] = 64;
  hf["intermediate_size"] = 128;
  hf["head_dim"] = 16;
  hf["linear_key_head_dim"] = 16;
  hf["linear_value_head_dim"] = 16;
  hf["max_position_embeddings"] = 512;
  std::ofstream(dump / "config.json") << hf.dump(1);
  config::JobConfig c;
  c.job.dump_folder = dump.string();
  c.model.name = "qwen3_next";
  c.model.hf_config = (dump / "config.json").string();
  c.model.tokenizer_path = "byte_chat";
  c.training.seq_len = 512;
  c.training.steps = 3;
  c.training.seed = 7;
  c.optimizer.lr = 1e-3;
  c.lr_scheduler.warmup_steps = 0;
  c.lr_scheduler.decay_type = config::DecayType::constant;
  c.validation.enabled = false;
  c.generator.max_tokens = 40;  // prompt (~60 tokens) + 40 crosses KV blocks and a 64-token chunk
  c.generator.temperature = 1.0;
  c.generator.kv_cache_bytes = 16 << 20;
  c.generator.seed = 11;
  c.rl.env = "alphabet_sort";
  c.rl.env_config = R"({"num_samples": 512, "num_validation": 16, "max_names": 3})";
  c.rl.group_size = 4;
  c.rl.rollouts_per_step = 8;
  c.rl.val_freq = 0;
  c.rl.microbatch_tokens = 600;
  c.checkpoint.enable = false;
  c.metrics.log_freq = 100;
  return c;
}

using test_util::lower_share;
using test_util::smooth_task;
using test_util::step_rows;

TEST(RLHybrid, LogprobDiffIsExactlyZeroEveryStep) {
  const fs::path dump = fresh_dir("parity");
  const config::JobConfig c = hybrid_job(dump);
  RLController ctl(c, smooth_task(c));
  const RLResult r = ctl.run({.print = false});
  EXPECT_EQ(r.steps_done, 3);
  EXPECT_EQ(r.logprob_diff_max, 0.0);
  const auto rows = step_rows(dump);
  ASSERT_EQ(rows.size(), 3u);
  double grad = 0;
  for (const json& row : rows) {
    EXPECT_EQ(row["logprob_diff_max"].get<double>(), 0.0) << row.dump();
    EXPECT_EQ(row["kl_gen_train"].get<double>(), 0.0);
    EXPECT_GT(row["trained_tokens"].get<int64_t>(), 0);
    grad += row["grad_norm"].get<double>();
  }
  EXPECT_GT(grad, 0.0);
  std::printf("hybrid RL: logprob_diff_max = %.1f over %zu steps\n", r.logprob_diff_max, rows.size());
}

TEST(RLHybrid, GeneratorOnlyParityBreakShowsInLogprobDiff) {
  const fs::path dump = fresh_dir("break");
  config::JobConfig c = hybrid_job(dump);
  c.training.steps = 1;
  c.generator.kv_block_size = 16;  // trainer attention keeps its 32-key blocks
  RLController ctl(c, smooth_task(c));
  const RLResult r = ctl.run({.print = false});
  std::printf("hybrid RL, generator KV block 16: logprob_diff_max = %.3g\n", r.logprob_diff_max);
  EXPECT_GT(r.logprob_diff_max, 0.0);
  EXPECT_LT(r.logprob_diff_max, 1e-3);
}

}  // namespace
}  // namespace titan::rl
