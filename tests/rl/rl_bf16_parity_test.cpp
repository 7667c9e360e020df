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

#include "tests/rl/rl_test_util.h"
#include "tests/util/test_files.h"
#include "titan/config/job_config.h"
#include "titan/core/error.h"
#include "titan/rl/controller.h"
#include "titan/rl/tasks.h"

namespace titan::rl {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path fresh_dir(const std::string& name) { return test::fresh_dir("rl_bf16_" + name); }

using namespace test_util;

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
  fs::remove_all(dump);
  fs::remove_all(dump32);
}

}  // namespace
}  // namespace titan::rl
