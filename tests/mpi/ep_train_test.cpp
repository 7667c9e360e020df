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

#include <cmath>
#include <cstdio>
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

// TP 2 × EP 2 on 4 ranks (dp_shard 2, from which ep is carved), and TP 2 alone, on
// qwen3_moe_debugmodel without sequence parallelism: attention and the LM head are split
// over tp, every MoE layer is replicated over tp (each tp rank routes the same rows; under
// EP its experts are sharded over the ep ranks of its tp coordinate). Not bitwise equal to
// one rank (TP's rowwise sums, tp_train_test.cpp), so TP's bounds: losses and validation
// losses within 1e-4 of one rank, grad norms within 1e-4 relative; bitwise run to run.
TEST(ExpertParallel, Qwen3MoeTp2Ep2AndTp2CloseToOneAndRepeatable) {
  const std::string recipe = "qwen3_moe_debugmodel";
  const TrainOutcome& one = one_rank(recipe);
  ASSERT_EQ(one.loss.size(), kSteps) << one.log;
  struct Layout {
    int np;
    std::string name;
    std::vector<std::string> args;
  };
  const std::vector<Layout> layouts = {
      {4, "tp2_ep2",
       {"--parallelism.tensor_parallel_degree=2", "--parallelism.enable_sequence_parallel=false",
        "--parallelism.expert_parallel_degree=2"}},
      {2, "tp2_moe", {"--parallelism.tensor_parallel_degree=2", "--parallelism.enable_sequence_parallel=false"}},
  };
  for (const Layout& l : layouts) {
    const TrainOutcome a = run_titan_train(l.np, l.name + "_a", train_args(recipe, l.args));
    const TrainOutcome b = run_titan_train(l.np, l.name + "_b", train_args(recipe, l.args));
    ASSERT_EQ(a.rc, 0) << a.log;
    ASSERT_EQ(b.rc, 0) << b.log;
    ASSERT_EQ(a.loss.size(), kSteps) << a.log;
    ASSERT_EQ(b.loss.size(), kSteps) << b.log;
    EXPECT_TRUE(a.logged_positive("tp_comm_bytes")) << l.name;
    if (l.np == 4) {
      EXPECT_TRUE(a.logged_positive("ep_a2a_bytes")) << l.name;
    }
    double worst = 0;
    for (size_t i = 0; i < kSteps; ++i) {
      EXPECT_LE(std::fabs(a.loss[i] - one.loss[i]), 1e-4) << l.name << " step " << i + 1;
      EXPECT_LE(std::fabs(a.grad_norm[i] - one.grad_norm[i]), 1e-4 * one.grad_norm[i]) << l.name << " step " << i + 1;
      worst = std::max(worst, std::fabs(a.loss[i] - one.loss[i]));
      EXPECT_TRUE(same_bits(a.loss[i], b.loss[i])) << l.name << " run to run, step " << i + 1;
      EXPECT_TRUE(same_bits(a.grad_norm[i], b.grad_norm[i])) << l.name << " run to run, step " << i + 1;
    }
    ASSERT_EQ(a.val_loss.size(), one.val_loss.size()) << l.name;
    for (size_t i = 0; i < one.val_loss.size(); ++i)
      EXPECT_LE(std::fabs(a.val_loss[i] - one.val_loss[i]), 1e-4) << l.name << " val_loss " << i;
    std::printf("%s: losses within %.3g of 1 rank\n", l.name.c_str(), worst);
    ASSERT_FALSE(a.weights.empty()) << l.name;
    EXPECT_EQ(a.weights.size(), one.weights.size()) << l.name << ": the export is not the full model";
    EXPECT_TRUE(a.weights == b.weights) << l.name << ": final weights differ run to run";
    EXPECT_FALSE(a.weights == one.weights) << l.name << ": the final weights have the 1-rank bits (is TP running?)";
  }
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
      {4,
       train_args("qwen3_moe_debugmodel",
                  {"--parallelism.expert_parallel_degree=2", "--parallelism.tensor_parallel_degree=2"}),
       "parallelism.enable_sequence_parallel=true: layer 1 has a moe feed-forward; sequence parallelism supports "
       "dense feed-forwards only (set it false: tensor parallelism then replicates MoE layers)"},
  };
  int i = 0;
  for (const Case& c : cases) {
    const TrainOutcome r = run_titan_train(c.np, "ep_refused" + std::to_string(i++), c.args);
    EXPECT_EQ(r.rc, 2) << r.log;
    EXPECT_NE(r.log.find(c.message), std::string::npos) << r.log;
  }
}
