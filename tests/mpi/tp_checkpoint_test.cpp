// Distributed checkpoints under tensor parallelism (ctest label mpi): `titan train` on the
// debugmodel with vocabulary 260 (so that tp 2 divides it), the global batch of 8 rows
// in microbatches of 2, saving every 3 of 6 steps.
//
//  - FSDP 4 saves; TP 2 × DP 2, TP 2 with sequence parallelism and 1 rank resume from
//    its step-3 checkpoint. The weights each layout reads back, gathered again by the
//    HF export of a run with nothing left to train, are memcmp-equal to the 1-rank
//    load's. Steps 4..6: bitwise equal to the uninterrupted 1-rank run at 1 rank (the
//    steps are bitwise equal to one rank, checkpoint_resume_test.cpp); within 1e-4 at
//    TP, whose steps are not bitwise equal to one rank (a rowwise GEMM over K/P columns
//    per rank summed over ranks adds in another order, tp_train_test.cpp).
//  - FSDP 2 × TP 2 saves; 1 rank loads its final checkpoint and exports it: the same
//    bytes as the HF export the 4-rank run gathered on rank 0 (pieces of colwise,
//    rowwise and vocab-parallel tensors placed by their boxes, norms written once). 1
//    rank resumes its step-3 checkpoint: steps 4..6 within 1e-4 of the 4-rank run's.
//  - TP 2 (with and without SP) resumed on its own layout is bitwise equal to its
//    uninterrupted run: the checkpoint holds every element once, the pieces are copied
//    back, and TP runs are bitwise equal run to run.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/mpi/checkpoint_run.h"

using namespace titan::test;
using namespace titan::test::ckpt;

namespace {

constexpr double kTpTol = 1e-4;  // the TP loss tolerance of tp_train_test.cpp

std::vector<std::string> job(const std::vector<std::string>& layout = {}) {
  std::vector<std::string> a = {"--recipe", "debugmodel", "--model.vocab_size=260", "--training.local_batch_size=2",
                                "--training.global_batch_size=8"};
  a.insert(a.end(), layout.begin(), layout.end());
  return a;
}
const std::vector<std::string> kTp2 = job({"--parallelism.tensor_parallel_degree=2"});
const std::vector<std::string> kTp2Sp =
    job({"--parallelism.tensor_parallel_degree=2", "--parallelism.enable_sequence_parallel=true"});
const std::vector<std::string> kTp2Dp2 =
    job({"--parallelism.tensor_parallel_degree=2", "--parallelism.data_parallel_shard_degree=2"});

const TrainRun& one_rank() { return straight(0, "tp_one", job()); }
const TrainRun& fsdp4() { return straight(4, "tp_fsdp4", job()); }
const TrainRun& fsdp2_tp2() { return straight(4, "fsdp2_tp2", kTp2Dp2); }

}  // namespace

TEST(TpCheckpoint, Fsdp4ToOneRankIsBitwise) {
  const TrainRun r = resume(fsdp4(), kInterval, 0, "fsdp4_to_1", job(), kSteps);
  expect_next_losses(r, one_rank(), 0, "FSDP 4 -> 1 rank");
  ASSERT_FALSE(one_rank().weights.empty());
  EXPECT_TRUE(r.weights == one_rank().weights) << "final weights differ from the uninterrupted 1-rank run";
}

TEST(TpCheckpoint, Fsdp4ToTp2Dp2) {
  const std::string one = loaded_weights(fsdp4(), 0, "fsdp4_load_1", job());
  ASSERT_FALSE(one.empty());
  EXPECT_TRUE(loaded_weights(fsdp4(), 4, "fsdp4_load_tp2dp2", kTp2Dp2) == one)
      << "TP 2 x DP 2 read back other bits than 1 rank";
  const TrainRun r = resume(fsdp4(), kInterval, 4, "fsdp4_to_tp2dp2", kTp2Dp2, kSteps);
  expect_next_losses(r, one_rank(), kTpTol, "FSDP 4 -> TP 2 x DP 2");
}

TEST(TpCheckpoint, Fsdp4ToTp2SequenceParallel) {
  EXPECT_TRUE(loaded_weights(fsdp4(), 2, "fsdp4_load_tp2sp", kTp2Sp) == loaded_weights(fsdp4(), 0, "fsdp4_load_1b", job()))
      << "TP 2 + SP read back other bits than 1 rank";
  const TrainRun r = resume(fsdp4(), kInterval, 2, "fsdp4_to_tp2sp", kTp2Sp, kSteps);
  expect_next_losses(r, one_rank(), kTpTol, "FSDP 4 -> TP 2 + SP");
}

TEST(TpCheckpoint, Fsdp2xTp2ToOneRank) {
  const TrainRun& src = fsdp2_tp2();
  ASSERT_FALSE(src.weights.empty()) << src.out;
  // The HF export gathered over tp and FSDP on rank 0 == 1 rank's export of the final checkpoint.
  const TrainRun last = resume(src, kSteps, 0, "fsdp2tp2_load_1", job(), kSteps);
  EXPECT_TRUE(last.weights == src.weights) << "the TP export differs from the 1-rank export of the same checkpoint";
  const TrainRun r = resume(src, kInterval, 0, "fsdp2tp2_to_1", job(), kSteps);
  expect_next_losses(r, src, kTpTol, "FSDP 2 x TP 2 -> 1 rank");

  // The index: colwise, rowwise and vocab pieces over tp and dp_shard; the norms once per dp_shard row block.
  const nlohmann::json man =
      nlohmann::json::parse(file_bytes(src.dump + "/checkpoint/step-3/MANIFEST.json"));
  const auto& t = man["tensors"];
  const auto placement = [&](const std::string& name, size_t i) {
    return t["model/" + name]["placements"][i]["mesh_dim"].get<std::string>() + ":" +
           t["model/" + name]["placements"][i]["placement"].get<std::string>();
  };
  EXPECT_EQ(placement("layers.0.attention.wq.weight", 0), "tp:Shard(0)");
  EXPECT_EQ(placement("layers.0.attention.wq.weight", 1), "dp_shard:Shard(0)");
  EXPECT_EQ(placement("layers.0.attention.wo.weight", 0), "tp:Shard(1)");
  EXPECT_EQ(placement("tok_embeddings.weight", 0), "tp:Shard(0)");
  EXPECT_EQ(placement("norm.weight", 0), "tp:Replicate()");
  EXPECT_EQ(t["model/layers.0.attention.wo.weight"]["shards"].size(), 4u);
  EXPECT_EQ(t["model/norm.weight"]["shards"].size(), 2u);  // 2 row blocks, each written by one of its 2 tp ranks
  EXPECT_EQ(t["optimizer/layers.0.feed_forward.w2.weight.exp_avg"]["shards"].size(), 4u);
}

TEST(TpCheckpoint, Tp2SameLayoutResumeIsBitwise) { expect_same_layout_resume(2, "tp2", kTp2); }
TEST(TpCheckpoint, Tp2SequenceParallelSameLayoutResumeIsBitwise) { expect_same_layout_resume(2, "tp2sp", kTp2Sp); }
