// Trainer failure paths that must not pass silently:
//   - a kill -9 after a checkpoint is published but before its step's metrics row
//     reached metrics.jsonl (simulated by deleting that row, the state such a kill
//     leaves): the resume writes the row back from the checkpoint, so every step has
//     its row exactly once, with the loss the uninterrupted run logged;
//   - metrics.jsonl=false writes no file, and a resume does not create one.
#include <gtest/gtest.h>

#include <fstream>

#include "tests/train/train_test_util.h"
#include "titan/train/trainer.h"

using namespace titan;
using namespace titan::test;

namespace {

config::JobConfig tiny_job(const std::string& dump, std::vector<std::string> overrides) {
  overrides.push_back("--job.dump_folder=" + dump);
  for (const char* o : {"--training.seq_len=32", "--training.local_batch_size=2", "--model.dim=32", "--model.n_layers=1",
                        "--model.n_heads=2", "--model.ffn_hidden_dim=64", "--validation.enabled=false",
                        "--lr_scheduler.warmup_steps=0", "--checkpoint.enable=true", "--checkpoint.interval=2",
                        "--checkpoint.keep_latest_k=0"})
    overrides.push_back(o);
  return config::resolve_config("debugmodel", std::nullopt, overrides);
}

void drop_row(const std::string& path, int64_t step) {
  std::ifstream in(path);
  std::string kept;
  for (std::string l; std::getline(in, l);)
    if (nlohmann::json::parse(l).value("step", int64_t{-1}) != step) kept += l + "\n";
  in.close();
  std::ofstream(path, std::ios::trunc) << kept;
}

TEST(TrainerFailures, MetricsRowOfTheLastCheckpointSurvivesAKill) {
  const std::string dump = fresh_dir("row_kill");
  std::map<int64_t, double> straight;
  {
    train::Trainer t(tiny_job(dump, {"--training.steps=4"}));
    t.train();
    straight = losses(read_metrics(dump));
  }
  ASSERT_EQ(straight.size(), 4u);
  drop_row(dump + "/metrics.jsonl", 4);  // step-4 checkpoint published, its row never written
  {
    train::Trainer t(tiny_job(dump, {"--training.steps=6"}));
    const train::TrainResult r = t.train();
    EXPECT_EQ(r.steps_done, 6);
  }
  const std::map<int64_t, double> after = losses(read_metrics(dump));  // fails on a step logged twice
  ASSERT_EQ(after.size(), 6u);
  for (int64_t s = 1; s <= 4; ++s) {
    ASSERT_TRUE(after.count(s)) << "no row for step " << s;
    EXPECT_TRUE(same_bits(after.at(s), straight.at(s))) << s;
  }
}

TEST(TrainerFailures, MetricsJsonlFalseWritesNothing) {
  const std::string dump = fresh_dir("no_jsonl");
  {
    train::Trainer t(tiny_job(dump, {"--training.steps=2", "--metrics.jsonl=false"}));
    t.train();
  }
  {
    train::Trainer t(tiny_job(dump, {"--training.steps=4", "--metrics.jsonl=false"}));
    EXPECT_EQ(t.train().steps_done, 4);
  }
  EXPECT_FALSE(fs::exists(dump + "/metrics.jsonl"));
  EXPECT_TRUE(fs::exists(dump + "/checkpoint/step-4"));
}

}  // namespace
