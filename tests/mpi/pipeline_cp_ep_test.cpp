// Context and expert parallelism inside pipeline stages, `titan train` under mpirun on 4
// ranks against one process (ctest label mpi).
//
// PP 2 × CP 2: the debugmodel (4 layers, untied embeddings) on sequences of 128 tokens
// (4 KV blocks of 32), global batch 4 in microbatches of 2 rows, the same seeds;
// Interleaved1F1B (4 stages, 2 per rank) with full activation checkpointing, so the
// backward recomputes each stage's context-parallel attention. The 1-rank run
// accumulates the same 2 microbatches in order. Each stage runs on its cp rank's tokens
// (head-tail chunks) and gathers K/V over cp (context_parallel.h); the activations
// between stages are those tokens' rows. Where the equalities come from: a stage
// receives the bits the previous stage computed (pipeline.h) and CP's forward is one
// rank's bit for bit (all-gathered K/V in the same KV blocks and order; per-token losses
// summed in token order), so the validation loss before training and the step-1 loss
// are memcmp-equal to one rank. The gradients are CP's (dK/dV and weight gradients summed
// per cp rank, then over ranks), so later losses and grad norms are within CP's 1e-5
// relative of one rank (cp_train_test.cpp), and bitwise equal run to run (every sum over
// ranks is in rank order).
//
// PP 2 × EP 2 (ep carved from dp_shard 2): qwen3_moe_debugmodel (8 routed experts,
// top-2, 4 layers; its HF config with untied embeddings), global batch 8 in microbatches of 2, max_norm
// 0.5; 1F1B. Bitwise equal to one rank (losses, grad norms, validation loss, final
// weights): PP's equality (pipeline_train_test.cpp) with EP's inside each stage
// (ep_train_test.cpp): each pp rank shards the experts of its own stage over ep, a row's
// expert output has the same bits on whichever rank computes it, and the pieces of each
// microbatch's expert gradient are summed after each stage backward in dp-rank order,
// microbatch after microbatch, as one rank's AccumulateGrad adds them; the grad norm adds
// every parameter's ‖g‖² in model order. Equality with the deterministic 1-rank run
// implies the run-to-run bits. Also deepseek_v3_debugmodel (layer 0 dense) on
// Interleaved1F1B (2 stages per rank) with full activation checkpointing.
//
// Checkpoints (saved at step 3 of 6): both layouts resumed on their own layout continue
// bit for bit (steps 4..6 and the final weights); PP 2 × EP 2's checkpoint resumed at 1
// rank gives the uninterrupted 1-rank run's steps and weights bit for bit, and 1 rank's
// export of the final PP 2 × CP 2 checkpoint is the 4-rank run's byte for byte (each
// element is stored once and copied back).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "tests/mpi/checkpoint_run.h"

using namespace titan::test;

namespace {

constexpr size_t kSteps = 4;

std::vector<std::string> dense(const std::vector<std::string>& layout = {}) {
  std::vector<std::string> a = {"--recipe",          "debugmodel",           "--model.n_layers=4",
                                "--model.tie_embeddings=false", "--training.seq_len=128",
                                "--training.global_batch_size=4"};
  a.insert(a.end(), layout.begin(), layout.end());
  return a;
}
// 1 rank: 2 accumulated microbatches of 2 rows. PP 2 × CP 2: the 4 rows as 2 pipeline microbatches.
const std::vector<std::string> kDenseOne = dense({"--training.local_batch_size=2"});
const std::vector<std::string> kPpCp = dense(
    {"--training.local_batch_size=4", "--parallelism.pipeline_parallel_degree=2",
     "--parallelism.pipeline_parallel_schedule=Interleaved1F1B", "--parallelism.pipeline_parallel_microbatch_size=2",
     "--parallelism.context_parallel_degree=2", "--training.activation_checkpoint=full"});

// A shipped MoE recipe's HF config with untied embeddings (PP refuses tied ones).
std::string untied_config(const std::string& recipe) {
  nlohmann::json c = nlohmann::json::parse(file_bytes(std::string(TITAN_SOURCE_DIR) + "/recipes/" + recipe + ".json"));
  c["tie_word_embeddings"] = false;
  const std::string p = fresh_dir(recipe + "_untied") + "/config.json";
  std::ofstream(p) << c.dump(2);
  return p;
}
std::vector<std::string> moe(const std::vector<std::string>& layout, const std::string& recipe = "qwen3_moe_debugmodel") {
  static std::map<std::string, std::string> configs;
  if (!configs.count(recipe)) configs[recipe] = untied_config(recipe);
  std::vector<std::string> a = {"--recipe", recipe, "--model.hf_config=" + configs[recipe],
                                "--training.global_batch_size=8", "--training.max_norm=0.5"};
  a.insert(a.end(), layout.begin(), layout.end());
  return a;
}
// 1 rank: 4 accumulated microbatches of 2 rows. PP 2 × EP 2 (dp_shard 2): each dp rank's
// 4 rows as 2 pipeline microbatches, dp rank q taking microbatches j ≡ q (mod 2).
std::vector<std::string> moe_one(const std::string& recipe = "qwen3_moe_debugmodel") {
  return moe({"--training.local_batch_size=2"}, recipe);
}
std::vector<std::string> pp_ep(const std::string& schedule = "1F1B", const std::string& recipe = "qwen3_moe_debugmodel",
                               const std::vector<std::string>& more = {}) {
  std::vector<std::string> l = {"--training.local_batch_size=4", "--parallelism.pipeline_parallel_degree=2",
                                "--parallelism.pipeline_parallel_schedule=" + schedule,
                                "--parallelism.pipeline_parallel_microbatch_size=2",
                                "--parallelism.expert_parallel_degree=2"};
  l.insert(l.end(), more.begin(), more.end());
  return moe(l, recipe);
}

std::vector<std::string> train_args(const std::vector<std::string>& base) {
  std::vector<std::string> a = {"train", "--training.steps=4", "--validation.freq=2", "--checkpoint.enable=false",
                                "--checkpoint.export_hf=true"};
  a.insert(a.end(), base.begin(), base.end());
  return a;
}

}  // namespace

TEST(PipelineContextParallel, Pp2Cp2ForwardBitwiseAndCloseToOne) {
  const TrainOutcome one = run_titan_train(0, "ppcp_one", train_args(kDenseOne));
  const TrainOutcome a = run_titan_train(4, "ppcp_a", train_args(kPpCp));
  const TrainOutcome b = run_titan_train(4, "ppcp_b", train_args(kPpCp));
  ASSERT_EQ(one.rc, 0) << one.log;
  ASSERT_EQ(a.rc, 0) << a.log;
  ASSERT_EQ(b.rc, 0) << b.log;
  ASSERT_EQ(one.loss.size(), kSteps) << one.log;
  ASSERT_EQ(a.loss.size(), kSteps) << a.log;
  EXPECT_NE(a.log.find("pipeline: Interleaved1F1B | 4 stages, 2 per rank"), std::string::npos) << a.log;
  EXPECT_TRUE(a.logged_positive("cp_comm_bytes")) << "no context-parallel communication was logged";
  EXPECT_TRUE(a.logged_positive("pp_bytes")) << "no stage traffic was logged";
  // The forward: bitwise.
  ASSERT_EQ(a.val_loss.size(), one.val_loss.size());
  ASSERT_GE(one.val_loss.size(), 1u);
  EXPECT_TRUE(same_bits(a.val_loss[0], one.val_loss[0]))
      << "validation loss before training " << a.val_loss[0] << " vs " << one.val_loss[0];
  EXPECT_TRUE(same_bits(a.loss[0], one.loss[0])) << "step-1 loss " << a.loss[0] << " vs " << one.loss[0];
  // The gradients and what follows them: within 1e-5 relative.
  double worst = 0;
  for (size_t i = 0; i < kSteps; ++i) {
    const double rl = std::fabs(a.loss[i] - one.loss[i]) / one.loss[i];
    const double rg = std::fabs(a.grad_norm[i] - one.grad_norm[i]) / one.grad_norm[i];
    EXPECT_LE(rl, 1e-5) << "loss, step " << i + 1;
    EXPECT_LE(rg, 1e-5) << "grad_norm, step " << i + 1;
    worst = std::max({worst, rl, rg});
  }
  for (size_t i = 0; i < one.val_loss.size(); ++i)
    EXPECT_LE(std::fabs(a.val_loss[i] - one.val_loss[i]) / one.val_loss[i], 1e-5) << "val_loss " << i;
  std::printf("PP 2 x CP 2: forward bitwise; losses and grad norms within %.3g relative of 1 rank\n", worst);
  // Run to run: the same bits.
  ASSERT_EQ(b.loss.size(), kSteps);
  for (size_t i = 0; i < kSteps; ++i) {
    EXPECT_TRUE(same_bits(a.loss[i], b.loss[i])) << "run to run, step " << i + 1;
    EXPECT_TRUE(same_bits(a.grad_norm[i], b.grad_norm[i])) << "run to run, step " << i + 1;
  }
  ASSERT_FALSE(a.weights.empty());
  EXPECT_EQ(a.weights.size(), one.weights.size()) << "the export is not the full model";
  EXPECT_TRUE(a.weights == b.weights) << "final weights differ run to run";
  EXPECT_FALSE(a.weights == one.weights) << "the final weights have the 1-rank bits (is CP running?)";
}

TEST(PipelineExpertParallel, Qwen3MoePp2Ep2BitwiseEqualToOne) {
  const TrainOutcome one = run_titan_train(0, "ppep_one", train_args(moe_one()));
  const TrainOutcome many = run_titan_train(4, "ppep", train_args(pp_ep()));
  expect_same_training(one, many, kSteps, "PP 2 x EP 2");
  EXPECT_NE(many.log.find("ep=2"), std::string::npos) << "the layout banner names ep:\n" << many.log;
  EXPECT_TRUE(many.logged_positive("ep_a2a_bytes")) << "no expert dispatch was logged";
}

TEST(PipelineExpertParallel, DeepseekV3Pp2Ep2InterleavedWithActivationCheckpointBitwiseEqualToOne) {
  // 4 stages, 2 per rank (rank 0: the embedding + dense layer 0, and MoE layer 3): after
  // each stage backward the other stage's experts add zero pieces; the recompute runs
  // each MoE layer's exchanges again, on both ep ranks in the same order.
  const TrainOutcome one = run_titan_train(0, "ppep_ds_one", train_args(moe_one("deepseek_v3_debugmodel")));
  const TrainOutcome many = run_titan_train(
      4, "ppep_ds",
      train_args(pp_ep("Interleaved1F1B", "deepseek_v3_debugmodel", {"--training.activation_checkpoint=full"})));
  expect_same_training(one, many, kSteps, "deepseek_v3 PP 2 (Interleaved1F1B) x EP 2");
  EXPECT_NE(many.log.find("pipeline: Interleaved1F1B | 4 stages, 2 per rank"), std::string::npos) << many.log;
}

TEST(PipelineContextParallelCheckpoint, Pp2Cp2SameLayoutAndToOneRank) {
  ckpt::expect_same_layout_resume(4, "ppcp", kPpCp);
  // 1 rank reads the final PP 2 × CP 2 checkpoint back: its export is the 4-rank run's.
  const ckpt::TrainRun& src = ckpt::straight(4, "ppcp", kPpCp);
  const ckpt::TrainRun last = ckpt::resume(src, ckpt::kSteps, 0, "ppcp_final_1", kDenseOne, ckpt::kSteps);
  ASSERT_FALSE(src.weights.empty()) << src.out;
  EXPECT_TRUE(last.weights == src.weights) << "1-rank export of the final PP 2 x CP 2 checkpoint differs";
}

TEST(PipelineExpertParallelCheckpoint, Pp2Ep2SameLayoutAndToOneRankAreBitwise) {
  ckpt::expect_same_layout_resume(4, "ppep", pp_ep());
  const ckpt::TrainRun& one = ckpt::straight(0, "ppep_one", moe_one());
  const ckpt::TrainRun r = ckpt::resume(ckpt::straight(4, "ppep", pp_ep()), ckpt::kInterval, 0, "ppep_to_1", moe_one(),
                                        ckpt::kSteps);
  ckpt::expect_next_losses(r, one, 0, "PP 2 x EP 2 -> 1 rank");
  ASSERT_FALSE(one.weights.empty()) << one.out;
  EXPECT_TRUE(r.weights == one.weights) << "PP 2 x EP 2 -> 1 rank: final weights differ from the uninterrupted run";
}
