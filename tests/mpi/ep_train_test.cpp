// Expert parallelism under mpirun against one process (ctest label mpi): `titan train`
// on the qwen3_moe and deepseek_v3 debug models (8 routed experts, top-2; 3 of 4 layers
// MoE) with the same global batch (8 rows), microbatches of 2 rows and seeds.
//
// Where the equality comes from (titan/distributed/expert_parallel.h): a row's expert
// output has the same bits on whichever rank computes it (batch-invariant grouped
// GEMM); each peer's rows are run as their own grouped GEMM, so the owner's weight
// gradient from peer q's rows is the 1-rank gradient of microbatch j ≡ q (mod dp) for
// those experts, and the pieces are summed in dp-rank order as a 1-rank run's
// AccumulateGrad adds the microbatches. Compared by memcmp: each step's loss and
// grad_norm, the validation loss, and the final weights (the HF export).
#include <gtest/gtest.h>

#include <map>

#include "tests/mpi/mpi_run.h"

using namespace titan::test;

namespace {

constexpr size_t kSteps = 4;

std::vector<std::string> train_args(const std::string& recipe, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> a = {"train",
                                "--recipe",
                                recipe,
                                "--training.steps=4",
                                "--training.local_batch_size=2",
                                "--training.global_batch_size=8",
                                "--training.max_norm=0.5",
                                "--validation.freq=4",
                                "--checkpoint.enable=false",
                                "--checkpoint.export_hf=true"};
  if (recipe != "debugmodel")  // the shipped HF config.json, found from any working directory
    a.push_back("--model.hf_config=" + std::string(TITAN_SOURCE_DIR) + "/recipes/" + recipe + ".json");
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

const TrainOutcome& one_rank(const std::string& recipe) {
  static std::map<std::string, TrainOutcome> cache;
  auto it = cache.find(recipe);
  if (it == cache.end()) it = cache.emplace(recipe, run_titan_train(0, "ep_one_" + recipe, train_args(recipe))).first;
  return it->second;
}

void expect_ep(const std::string& recipe, int np, const std::string& name, const std::vector<std::string>& layout) {
  const TrainOutcome many = run_titan_train(np, name, train_args(recipe, layout));
  expect_same_training(one_rank(recipe), many, kSteps, recipe + " " + name);
  EXPECT_NE(many.log.find("ep=2"), std::string::npos) << "the layout banner names ep:\n" << many.log;
}

}  // namespace

TEST(ExpertParallel, Qwen3MoeTwoRanksBitwiseEqualToOne) {
  expect_ep("qwen3_moe_debugmodel", 2, "ep2", {"--parallelism.expert_parallel_degree=2"});
}

TEST(ExpertParallel, Qwen3MoeTwoRanksWithActivationCheckpointBitwiseEqualToOne) {
  // The recompute in backward runs each MoE layer's exchanges again, on every rank in
  // the same order; activation checkpointing keeps the bits (against the plain 1-rank run).
  expect_ep("qwen3_moe_debugmodel", 2, "ep2_ac",
            {"--parallelism.expert_parallel_degree=2", "--training.activation_checkpoint=full"});
}

TEST(ExpertParallel, DeepseekV3TwoRanksBitwiseEqualToOne) {
  expect_ep("deepseek_v3_debugmodel", 2, "ep2", {"--parallelism.expert_parallel_degree=2"});
}

TEST(ExpertParallel, Qwen3MoeEp2InFsdp4BitwiseEqualToOne) {
  // dp_shard 4 = dp_shard_mod_ep 2 × ep 2: the experts' gradients are also summed over
  // the 2 expert-dp ranks.
  expect_ep("qwen3_moe_debugmodel", 4, "ep2_fsdp4", {"--parallelism.expert_parallel_degree=2"});
}

TEST(ExpertParallel, DeepseekV3Ep2InHsdpBitwiseEqualToOne) {
  expect_ep("deepseek_v3_debugmodel", 4, "ep2_hsdp",
            {"--parallelism.expert_parallel_degree=2", "--parallelism.data_parallel_replicate_degree=2",
             "--parallelism.data_parallel_shard_degree=2"});
}

TEST(ExpertParallel, RefusedLayouts) {
  struct Case {
    int np;
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {2, train_args("debugmodel", {"--parallelism.expert_parallel_degree=2"}), "needs a mixture-of-experts model"},
      {2, train_args("qwen3_moe_debugmodel", {"--parallelism.expert_parallel_degree=4"}),
       "parallelism.expert_parallel_degree=4 must be a multiple of context_parallel_degree"},
  };
  int i = 0;
  for (const Case& c : cases) {
    const TrainOutcome r = run_titan_train(c.np, "ep_refused" + std::to_string(i++), c.args);
    EXPECT_EQ(r.rc, 2) << r.log;
    EXPECT_NE(r.log.find(c.message), std::string::npos) << r.log;
  }
}
