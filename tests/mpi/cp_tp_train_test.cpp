// Context parallelism with tensor parallelism under mpirun against one process (ctest
// label mpi): the debugmodel with vocabulary 260 (so that tp 2 divides it) on sequences
// of 128 tokens, 20 steps of the same global batch (4 rows) in microbatches of 2 rows,
// the same seeds. CP 2 × TP 2 on 4 ranks, with and without sequence parallelism: each
// cp rank holds one head and one tail chunk of every row, each tp rank half the heads,
// FFN columns and vocabulary (context_parallel.h, tensor_parallel.h).
//  - step 1's loss within 1e-5 relative of the 1-rank run's (the same weights, one
//    forward: the K/V gather over cp gives every query the 1-rank keys, and only the
//    tp sums' order and the loss's per-cp-rank partial sums differ);
//  - every step's loss (and the validation losses) within 1e-4 of the 1-rank run's,
//    the grad norm within 1e-4 relative (clipping at max_norm 0.8 binds on some steps:
//    checked, so the norm over tp × cp's FSDP shards scales the update);
//  - bitwise equal run to run (losses, grad norms, the final weights of the HF export,
//    gathered over cp's FSDP shards and tp, the full model's size).
// Not bitwise equal to 1 rank (a rowwise GEMM over K/P columns per rank summed over
// ranks adds in another order, tp_train_test.cpp): the test checks that the bits differ,
// so it cannot pass by running the 1-rank code.
// Checkpoints: CP 2 × TP 2 resumed on its own layout continues bit for bit; its final
// checkpoint loaded on 1 rank exports the bytes the 4-rank run's HF export gathered
// (FSDP rows over dp_shard×cp inside tp boxes, named globally).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "tests/mpi/checkpoint_run.h"
#include "tests/mpi/mpi_run.h"

using namespace titan::test;

namespace {

constexpr size_t kTrainSteps = 20;

const std::vector<std::string> kModel = {"--recipe",
                                         "debugmodel",
                                         "--model.vocab_size=260",
                                         "--training.seq_len=128",
                                         "--training.local_batch_size=2",
                                         "--training.global_batch_size=4"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::vector<std::string> kCpTp = {"--parallelism.context_parallel_degree=2",
                                        "--parallelism.tensor_parallel_degree=2"};

TrainOutcome run_train(int np, const std::string& name, const std::vector<std::string>& layout) {
  std::vector<std::string> a = with({"train", "--training.steps=20", "--training.max_norm=0.8",
                                     "--validation.freq=10", "--checkpoint.export_hf=true"},
                                    with(kModel, layout));
  TrainOutcome r = run_titan_train(np, name, a);
  EXPECT_EQ(r.rc, 0) << r.log;
  return r;
}

const TrainOutcome& one_rank() {
  static const TrainOutcome r = run_train(0, "cptp_one", {});
  return r;
}

void expect_close_and_repeatable(const std::string& name, const std::vector<std::string>& layout) {
  const TrainOutcome& one = one_rank();
  const TrainOutcome a = run_train(4, name + "_a", layout), b = run_train(4, name + "_b", layout);
  EXPECT_TRUE(a.logged_positive("tp_comm_bytes")) << name << ": no tensor-parallel communication was logged";
  expect_close_to_one_rank_and_repeatable(name, one, a, b, kTrainSteps, 0.8);
}

}  // namespace

TEST(ContextTensorParallel, CpTwoByTpTwoCloseToOneAndRepeatable) {
  expect_close_and_repeatable("cp2_tp2", with(kCpTp, {"--parallelism.enable_sequence_parallel=false"}));
}

TEST(ContextTensorParallel, CpTwoByTpTwoSequenceParallelCloseToOneAndRepeatable) {
  expect_close_and_repeatable("cp2_tp2_sp", with(kCpTp, {"--parallelism.enable_sequence_parallel=true"}));
}

TEST(ContextTensorParallel, CheckpointResumesOnItsLayoutAndLoadsOnOneRank) {
  using namespace titan::test::ckpt;
  const std::vector<std::string> layout = with(kModel, with(kCpTp, {"--parallelism.enable_sequence_parallel=true"}));
  expect_same_layout_resume(4, "cp2_tp2_sp", layout);
  const TrainRun& src = straight(4, "cp2_tp2_sp", layout);
  ASSERT_FALSE(src.weights.empty()) << src.out;
  const TrainRun last = resume(src, ckpt::kSteps, 0, "cp2_tp2_sp_load_1", kModel, ckpt::kSteps);
  EXPECT_TRUE(last.weights == src.weights) << "the CP x TP export differs from the 1-rank export of the same checkpoint";
}
