// metrics.enable_tensorboard: the event files of `titan train` and `titan rl` read back
// with the tensorboard package's EventAccumulator (venv) hold every metrics.jsonl key
// at the same steps with the same values (tb_readback.py); CRC-32C against the
// published check values (RFC 3720 B.4, and the "123456789" check of the catalogue).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "titan/config/resolve.h"
#include "titan/rl/controller.h"
#include "titan/rl/tasks.h"
#include "titan/train/tensorboard.h"
#include "titan/train/trainer.h"
#include "tests/util/test_files.h"
#include "tests/util/tiny_models.h"
#include "tests/util/venv_python.h"

using namespace titan;

namespace {

namespace fs = std::filesystem;

std::string readback(const fs::path& dump, int* status) {
  const std::string cmd = "'" + titan::test::venv_python() + "' '" + TITAN_SOURCE_DIR + "/tests/train/tb_readback.py' '" +
                          dump.string() + "' 2>&1";
  const test::ShellResult r = test::run_shell(cmd);
  *status = r.code;
  return r.out;
}

fs::path fresh(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("titan_tb_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  return d;
}

TEST(TensorBoard, Crc32cCheckValues) {
  EXPECT_EQ(train::crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(train::crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(train::crc32c(std::string(32, '\xff')), 0x62A8AB43u);
}

TEST(TensorBoard, TrainScalarsReadBack) {
  const fs::path dump = fresh("train");
  config::JobConfig job = config::resolve_config(
      "debugmodel", std::nullopt,
      {"--training.steps=4", "--validation.enabled=true", "--validation.freq=2", "--validation.steps=1",
       "--metrics.enable_tensorboard=true", "--lr_scheduler.warmup_steps=1", "--job.dump_folder=" + dump.string()});
  train::Trainer trainer(job);
  trainer.train();
  int st = -1;
  const std::string out = readback(dump, &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_NE(out.find("read-back ok"), std::string::npos) << out;
  std::printf("%s", out.c_str());
  fs::remove_all(dump);
}

TEST(TensorBoard, RLScalarsReadBack) {
  const fs::path dump = fresh("rl");
  config::JobConfig c;
  c.job.dump_folder = dump.string();
  test::set_tiny_chat_qwen3(c.model);
  c.training.seq_len = 512;
  c.training.steps = 2;
  c.validation.enabled = false;
  c.lr_scheduler.warmup_steps = 0;
  c.lr_scheduler.decay_type = config::DecayType::constant;
  c.generator.max_tokens = 8;
  c.generator.kv_cache_bytes = 16 << 20;
  c.rl.env = "alphabet_sort";
  c.rl.env_config = R"({"num_samples": 64, "num_validation": 4, "max_names": 3})";
  c.rl.group_size = 2;
  c.rl.rollouts_per_step = 4;
  c.rl.val_freq = 1;
  c.rl.val_samples = 2;
  c.checkpoint.enable = false;
  c.metrics.enable_tensorboard = true;
  rl::RLController ctl(c, rl::make_task("alphabet_sort", nlohmann::json::parse(c.rl.env_config)));
  ctl.run({.print = false});
  int st = -1;
  const std::string out = readback(dump, &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_NE(out.find("read-back ok"), std::string::npos) << out;
  std::printf("%s", out.c_str());
  fs::remove_all(dump);
}

}  // namespace
