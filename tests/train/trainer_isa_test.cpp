// One bit pattern per machine, whole runs: `titan train` for 3 steps and then `titan
// generate` from its checkpoint (sampled, with top logprobs) give the same bytes under
// TITAN_ISA=avx2 as under TITAN_ISA=avx512: the fp32 master weights and the optimizer
// state in the checkpoint, every step's loss and every generated token and logprob.
// bf16 compute (model.compute_dtype=bf16, bf16 weight panels in the generator) and fp32
// runs of the architecture families (MoE with sinks and sliding windows, MLA + DeepSeek
// sparse attention, Gated DeltaNet and Kimi Delta Attention hybrids, soft-caps). Per
// kernel: tests/kernels/isa_parity_test.cpp. Skipped where the CPU has no AVX-512.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/train/train_test_util.h"
#include "titan/kernels/cpu/dispatch.h"

using namespace titan;
using namespace titan::test;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Run {
  std::string model, optimizer, generated;
  std::map<int64_t, double> losses;
};

Run run(const std::string& recipe, const std::string& dtype, const std::string& isa) {
  const std::string dump = fresh_dir("isa_" + recipe + "_" + dtype + "_" + isa);
  const std::string env = "cd " TITAN_SOURCE_DIR " && TITAN_ISA=" + isa + " ";
  const std::string train = env + titan_exe() + " train --recipe=" + recipe + " --model.compute_dtype=" + dtype +
                            " --training.steps=3 --validation.enabled=false --checkpoint.enable=true"
                            " --checkpoint.interval=3 --metrics.log_freq=1 --job.dump_folder=" + dump + " > " + dump +
                            "/train.txt 2>&1";
  EXPECT_EQ(std::system(train.c_str()), 0) << train;
  const std::string ckpt = dump + "/checkpoint/step-3";
  {
    std::ofstream in(dump + "/prompts.jsonl");
    in << "{\"prompt\": \"ROMEO:\", \"n\": 3}\n{\"prompt\": \"To be, or not\", \"temperature\": 0}\n";
  }
  const std::string gen = env + titan_exe() + " generate --checkpoint " + ckpt + " --input " + dump +
                          "/prompts.jsonl --output " + dump + "/out.jsonl --max-tokens 24 --logprobs 3 > " + dump +
                          "/generate.txt 2>&1";
  EXPECT_EQ(std::system(gen.c_str()), 0) << gen;
  Run r{slurp(ckpt + "/model.safetensors"), slurp(ckpt + "/optimizer.safetensors"), slurp(dump + "/out.jsonl"),
        losses(read_metrics(dump))};
  fs::remove_all(dump);
  return r;
}

void expect_same_run(const std::string& recipe, const std::string& dtype) {
  if (kernels::cpu::cpu_isa() != kernels::cpu::Isa::avx512) GTEST_SKIP() << "this CPU has no AVX-512";
  const Run a = run(recipe, dtype, "avx2"), b = run(recipe, dtype, "avx512");
  ASSERT_EQ(a.losses.size(), 3u);
  ASSERT_FALSE(a.model.empty());
  ASSERT_NE(a.generated.find("logprob"), std::string::npos);
  EXPECT_TRUE(a.model == b.model) << recipe << " " << dtype << ": model.safetensors differs";
  EXPECT_TRUE(a.optimizer == b.optimizer) << recipe << " " << dtype << ": optimizer.safetensors differs";
  EXPECT_TRUE(a.generated == b.generated) << recipe << " " << dtype << ": generated tokens or logprobs differ";
  for (const auto& [step, loss] : a.losses) EXPECT_TRUE(same_bits(loss, b.losses.at(step))) << "step " << step;
}

TEST(TrainerIsa, DenseBf16) { expect_same_run("debugmodel", "bf16"); }
TEST(TrainerIsa, DenseF32) { expect_same_run("debugmodel", "f32"); }
TEST(TrainerIsa, Gemma2SoftcapsAndSlidingWindowBf16) { expect_same_run("gemma2_debugmodel", "bf16"); }
TEST(TrainerIsa, GptOssMoeWithSinksF32) { expect_same_run("gpt_oss_debugmodel", "f32"); }
TEST(TrainerIsa, DeepSeekV32MlaAndSparseAttentionF32) { expect_same_run("deepseek_v32_debugmodel", "f32"); }
TEST(TrainerIsa, Qwen3NextGatedDeltaNetF32) { expect_same_run("qwen3_next_debugmodel", "f32"); }
TEST(TrainerIsa, KimiLinearDeltaAttentionF32) { expect_same_run("kimi_linear_debugmodel", "f32"); }

}  // namespace
