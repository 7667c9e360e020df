// The trainer with model.compute_dtype = bf16 (titan/ops/bf16_compute.h) on the
// debugmodel recipe:
//   - resume is bitwise in bf16: 6 steps straight vs 3 + a new Trainer resuming from
//     the step-3 checkpoint + 3 more give identical losses and memcmp-identical fp32
//     master weights; the bf16 losses differ from an fp32 run's (bf16 is in effect);
//   - the bf16 instruction does not change the bits: `titan train` in bf16 on the
//     AVX-512 BF16 instruction path and on its emulation (TITAN_BF16_DOT=emulation)
//     ends with memcmp-identical weights and identical losses (where the CPU has
//     AVX512_BF16). The AVX2 build (TITAN_ISA=avx2) against AVX-512, whole runs:
//     tests/train/trainer_isa_test.cpp;
//   - a family bf16 compute does not cover is refused with a one-line error.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>

#include "tests/train/train_test_util.h"
#include "titan/core/error.h"
#include "titan/kernels/cpu/bf16.h"
#include "titan/train/trainer.h"

using namespace titan;
using namespace titan::test;

namespace {

config::JobConfig debug_job(const std::string& dump, std::vector<std::string> overrides) {
  overrides.push_back("--job.dump_folder=" + dump);
  return config::resolve_config("debugmodel", std::nullopt, overrides);
}

TEST(TrainerBf16, ResumeIsBitwiseAndDiffersFromFp32) {
  const std::string dump = fresh_dir("bf16_resume");
  const auto job = debug_job(dump, {"--model.compute_dtype=bf16", "--training.steps=6", "--validation.enabled=false",
                                    "--checkpoint.enable=true", "--checkpoint.interval=3",
                                    "--checkpoint.keep_latest_k=0"});
  std::map<std::string, std::vector<float>> straight_weights;
  std::vector<nlohmann::json> straight;
  {
    train::Trainer t(job);
    EXPECT_EQ(t.train().steps_done, 6);
    straight_weights = snapshot(t.model());
    straight = read_metrics(dump);
  }
  const std::string ck = dump + "/checkpoint";
  fs::remove_all(ck + "/step-6");
  {
    train::Trainer t(job);
    EXPECT_EQ(t.train().steps_done, 6);
    expect_same_weights(straight_weights, snapshot(t.model()));
  }
  const auto a = losses(straight), b = losses(read_metrics(dump));
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  for (const auto& [step, loss] : a) EXPECT_TRUE(same_bits(loss, b.at(step))) << "step " << step;

  const std::string dump32 = fresh_dir("bf16_vs_f32");
  {
    train::Trainer t(debug_job(dump32, {"--training.steps=6", "--validation.enabled=false"}));
    t.train();
  }
  const auto c = losses(read_metrics(dump32));
  ASSERT_EQ(c.size(), 6u);
  int differ = 0;
  for (const auto& [step, loss] : a) {
    differ += !same_bits(loss, c.at(step));
    EXPECT_NEAR(loss, c.at(step), 0.02 * c.at(step)) << "step " << step;  // bf16 rounding, not a different model
  }
  EXPECT_GT(differ, 0);
  fs::remove_all(dump);
  fs::remove_all(dump32);
}

// `titan train` for 3 bf16 steps under `env`; returns the step-3 weights and the losses.
std::pair<std::map<std::string, std::vector<float>>, std::map<int64_t, double>> run_cli(const std::string& name,
                                                                                        const std::string& env) {
  const std::string dump = fresh_dir("bf16_isa_" + name);
  const std::string cmd = env + " " + titan_exe() +
                          " train --recipe=debugmodel --model.compute_dtype=bf16 --training.steps=3 "
                          "--validation.enabled=false --checkpoint.enable=true --checkpoint.interval=3 "
                          "--metrics.log_freq=1 --job.dump_folder=" + dump + " > " + dump + "/log.txt 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto w = checkpoint_weights(dump + "/checkpoint/step-3");
  auto l = losses(read_metrics(dump));
  fs::remove_all(dump);
  return {w, l};
}

TEST(TrainerBf16, InstructionAndEmulationGiveTheSameRun) {
  if (!kernels::cpu::bf16_instruction_available()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  const auto emu = run_cli("emulation", "TITAN_ISA=avx512 TITAN_BF16_DOT=emulation");
  const auto inst = run_cli("instruction", "TITAN_ISA=avx512 TITAN_BF16_DOT=instruction");
  ASSERT_EQ(emu.second.size(), 3u);
  ASSERT_EQ(inst.second.size(), 3u);
  expect_same_weights(emu.first, inst.first);
  for (const auto& [step, loss] : emu.second) EXPECT_TRUE(same_bits(loss, inst.second.at(step))) << "step " << step;
}

TEST(TrainerBf16, UncoveredFamilyIsRefused) {
  const std::string dump = fresh_dir("bf16_refuse");
  try {
    train::Trainer t(config::resolve_config("qwen3_next_debugmodel", std::nullopt,
                                            {"--model.compute_dtype=bf16", "--job.dump_folder=" + dump}));
    t.train();
    FAIL() << "qwen3_next trained in bf16";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("model.compute_dtype=bf16 is not supported for layer"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  fs::remove_all(dump);
}

}  // namespace
