// Distributed checkpoints under expert and context parallelism (ctest label mpi),
// saving every 3 of 6 steps:
//
// EP: qwen3_moe_debugmodel (8 routed experts), global batch 8 in microbatches of 2. EP
// steps are bitwise equal to one rank (ep_train_test.cpp), and a checkpoint holds each
// element of the weights and of AdamW's moments once, the experts as row boxes over ep
// (the expert-dp replicas write them once). So: EP 2 resumed on its own layout, EP 2 ->
// 1 rank and 1 rank -> EP 2 in FSDP 4 give steps 4..6 and the final weights (HF export)
// memcmp-equal to the uninterrupted 1-rank run.
//
// CP: the debugmodel on sequences of 128 tokens, global batch 4 in microbatches of 2. The
// parameters are row boxes of one torch.chunk split over dp_shard × cp. CP steps are not
// bitwise equal to one rank past the forward (dK/dV summed per cp rank, cp_train_test.cpp),
// but are run to run: CP 2 resumed on its own layout is bitwise equal to its
// uninterrupted run; the weights 1 rank and CP 2 read back from a FSDP 2 × CP 2
// checkpoint are the same bits (HF exports of runs with nothing left to train), and 1
// rank's export of the final FSDP 2 × CP 2 checkpoint is the 4-rank run's export byte for
// byte; 1 rank -> CP 2 continues within 1e-5 relative of one rank (cp_train_test's bound).
// CP 2 × TP 2 (vocabulary 260) resumed on its own layout is bitwise equal to its
// uninterrupted run (bitwise run to run, cp_train_test.cpp), and 1 rank's export of its
// final checkpoint is the 4-rank run's export byte for byte.
#include <gtest/gtest.h>

#include "tests/mpi/checkpoint_run.h"

using namespace titan::test;
using namespace titan::test::ckpt;

namespace {

std::vector<std::string> moe(const std::vector<std::string>& layout = {}) {
  std::vector<std::string> a = {"--recipe", "qwen3_moe_debugmodel",
                                "--model.hf_config=" + std::string(TITAN_SOURCE_DIR) + "/recipes/qwen3_moe_debugmodel.json",
                                "--training.local_batch_size=2", "--training.global_batch_size=8"};
  a.insert(a.end(), layout.begin(), layout.end());
  return a;
}
std::vector<std::string> dense128(const std::vector<std::string>& layout = {}) {
  std::vector<std::string> a = {"--recipe", "debugmodel", "--training.seq_len=128", "--training.local_batch_size=2",
                                "--training.global_batch_size=4"};
  a.insert(a.end(), layout.begin(), layout.end());
  return a;
}
const std::vector<std::string> kEp2 = moe({"--parallelism.expert_parallel_degree=2"});
const std::vector<std::string> kCp2 = dense128({"--parallelism.context_parallel_degree=2"});
const std::vector<std::string> kFsdp2Cp2 =
    dense128({"--parallelism.context_parallel_degree=2", "--parallelism.data_parallel_shard_degree=2"});

const TrainRun& moe_one() { return straight(0, "moe_one", moe()); }
const TrainRun& dense_one() { return straight(0, "dense128_one", dense128()); }

void expect_final_weights(const TrainRun& r, const TrainRun& ref, const std::string& what) {
  ASSERT_FALSE(ref.weights.empty()) << ref.out;
  EXPECT_TRUE(r.weights == ref.weights) << what << ": final weights differ";
}

}  // namespace

TEST(EpCheckpoint, Ep2SameLayoutResumeIsBitwise) { expect_same_layout_resume(2, "ep2", kEp2); }

TEST(EpCheckpoint, Ep2ToOneRankIsBitwise) {
  const TrainRun& src = straight(2, "ep2", kEp2);
  const TrainRun r = resume(src, kInterval, 0, "ep2_to_1", moe(), kSteps);
  expect_next_losses(r, moe_one(), 0, "EP 2 -> 1 rank");
  expect_final_weights(r, moe_one(), "EP 2 -> 1 rank");
}

TEST(EpCheckpoint, OneRankToEp2InFsdp4IsBitwise) {
  const TrainRun r = resume(moe_one(), kInterval, 4, "1_to_ep2fsdp4", kEp2, kSteps);
  expect_next_losses(r, moe_one(), 0, "1 rank -> EP 2 in FSDP 4");
  expect_final_weights(r, moe_one(), "1 rank -> EP 2 in FSDP 4");
}

TEST(CpCheckpoint, Cp2SameLayoutResumeIsBitwise) { expect_same_layout_resume(2, "cp2", kCp2); }

TEST(CpCheckpoint, Fsdp2Cp2ToOneRankAndCp2) {
  const TrainRun& src = straight(4, "fsdp2_cp2", kFsdp2Cp2);
  const std::string one = loaded_weights(src, 0, "fsdp2cp2_load_1", dense128());
  ASSERT_FALSE(one.empty());
  EXPECT_TRUE(loaded_weights(src, 2, "fsdp2cp2_load_cp2", kCp2) == one) << "CP 2 read back other bits than 1 rank";
  const TrainRun last = resume(src, kSteps, 0, "fsdp2cp2_final_1", dense128(), kSteps);
  expect_final_weights(last, src, "1-rank export of the final FSDP 2 x CP 2 checkpoint");
}

TEST(CpCheckpoint, OneRankToCp2) {
  const TrainRun r = resume(dense_one(), kInterval, 2, "1_to_cp2", kCp2, kSteps);
  ASSERT_TRUE(dense_one().loss.count(kInterval + 1)) << dense_one().out;
  expect_next_losses(r, dense_one(), 1e-5 * dense_one().loss.at(kInterval + 1), "1 rank -> CP 2");
}

TEST(CpCheckpoint, Cp2Tp2SameLayoutAndToOneRank) {
  // CP 2 × TP 2: each rank writes its dp_shard × cp rows of its tp slice of each tensor.
  const std::vector<std::string> layout = dense128({"--model.vocab_size=260", "--parallelism.context_parallel_degree=2",
                                                    "--parallelism.tensor_parallel_degree=2"});
  expect_same_layout_resume(4, "cp2tp2", layout);
  const TrainRun& src = straight(4, "cp2tp2", layout);
  const TrainRun last = resume(src, kSteps, 0, "cp2tp2_final_1", dense128({"--model.vocab_size=260"}), kSteps);
  expect_final_weights(last, src, "1-rank export of the final CP 2 x TP 2 checkpoint");
}

TEST(EpCheckpoint, Tp2Ep2SameLayoutResumeIsBitwise) {
  // TP 2 × EP 2 (no SP): the experts as row boxes over ep, replicated over tp (written once).
  expect_same_layout_resume(4, "tp2ep2",
                            moe({"--parallelism.expert_parallel_degree=2", "--parallelism.tensor_parallel_degree=2",
                                 "--parallelism.enable_sequence_parallel=false"}));
}
