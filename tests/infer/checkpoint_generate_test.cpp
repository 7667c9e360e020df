// `titan generate --checkpoint` loads what `titan train` saved: train the debugmodel
// recipe for 2 steps with checkpoints on, then the greedy completion of the generate
// program (engine, paged KV cache) must equal the trainer's own greedy sample
// (Trainer::sample: full recompute on the packed path, argmax) for the same weights.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include "titan/config/resolve.h"
#include "titan/train/trainer.h"

using namespace titan;

namespace {

namespace fs = std::filesystem;

std::string titan_exe() {
  if (const char* b = std::getenv("TITAN_BUILD")) return std::string(b) + "/titan";
  return (fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "titan").string();
}

TEST(GenerateCheckpoint, GreedyEqualsTrainerSample) {
  const fs::path dump = fs::path(::testing::TempDir()) / ("titan_gen_ckpt_" + std::to_string(getpid()));
  fs::remove_all(dump);
  config::JobConfig job = config::resolve_config(
      "debugmodel", std::nullopt,
      {"--training.steps=2", "--checkpoint.enable=true", "--checkpoint.interval=2", "--validation.enabled=false",
       "--lr_scheduler.warmup_steps=1", "--job.dump_folder=" + dump.string()});
  train::Trainer trainer(job);
  trainer.train();
  const std::string prompt = "ROMEO:";
  const std::string expected = trainer.sample(prompt, 24, 0.0, 0);

  const std::string cmd = "'" + titan_exe() + "' generate --checkpoint '" + (dump / "checkpoint").string() +
                          "' --prompt '" + prompt + "' --temperature 0 --max-tokens 24 --ignore-eos 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  std::array<char, 4096> buf;
  for (size_t n; (n = fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), n);
  const int st = pclose(p);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << cmd << "\n" << out;
  EXPECT_EQ(out, prompt + expected + "\n");
  fs::remove_all(dump);
}

}  // namespace
