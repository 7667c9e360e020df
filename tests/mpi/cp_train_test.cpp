// Context parallelism in `titan train` under mpirun against one process (ctest label
// mpi): the debugmodel (heads 4, kv heads 2) on sequences of 128 tokens (4 KV blocks of
// 32) for 4 steps, global batch 4 in microbatches of 2 rows, the same seeds. CP 2 on 2
// ranks and CP 2 × FSDP 2 on 4 ranks; CP 2 × TP 2 (below).
//
// Where the equalities come from (context_parallel.h): each cp rank runs the per-token
// layers on its tokens with the same batch-invariant kernels, and its queries attend to
// the K/V of the whole sequence, all-gathered, in the same KV blocks and order as one
// rank; the per-token losses of all cp ranks are summed in token order as one rank sums
// them. So the forward is bitwise equal to one rank: the validation loss before
// training and the step-1 loss (a sum of every token's loss, in token order) are
// compared by memcmp. The gradients are not: a key's dK / dV and every weight gradient
// is summed per cp rank and then over ranks, in another order than one rank's sums, so
// the later losses and every grad norm are within 1e-5 relative, the final weights differ
// from one rank's — and everything is bitwise equal run to run (the sums over ranks are
// in rank order).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "tests/mpi/mpi_run.h"

using namespace titan::test;

namespace {

constexpr size_t kSteps = 4;

std::vector<std::string> train_args(const std::vector<std::string>& extra) {
  std::vector<std::string> a = {"train",
                                "--recipe",
                                "debugmodel",
                                "--training.seq_len=128",
                                "--training.steps=4",
                                "--training.local_batch_size=2",
                                "--training.global_batch_size=4",
                                "--validation.freq=2",
                                "--checkpoint.export_hf=true"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

using RunResult = TrainOutcome;

RunResult run_train(int np, const std::string& name, const std::vector<std::string>& extra) {
  RunResult r = run_titan_train(np, name, train_args(extra));
  EXPECT_EQ(r.rc, 0) << r.log;
  return r;
}

const RunResult& one_rank() {
  static const RunResult r = run_train(0, "one", {});
  return r;
}

void expect_forward_bitwise_and_close(int np, const std::string& name, const std::vector<std::string>& extra) {
  const RunResult& one = one_rank();
  const RunResult a = run_train(np, name + "_a", extra), b = run_train(np, name + "_b", extra);
  ASSERT_EQ(one.loss.size(), kSteps);
  ASSERT_EQ(a.loss.size(), kSteps) << name;
  EXPECT_TRUE(a.logged_positive("cp_comm_bytes")) << name << ": no context-parallel communication was logged";
  // The forward: bitwise.
  ASSERT_EQ(a.val_loss.size(), one.val_loss.size()) << name;
  ASSERT_GE(one.val_loss.size(), 1u);
  EXPECT_TRUE(same_bits(a.val_loss[0], one.val_loss[0]))
      << name << ": validation loss before training " << a.val_loss[0] << " vs " << one.val_loss[0];
  EXPECT_TRUE(same_bits(a.loss[0], one.loss[0])) << name << ": step-1 loss " << a.loss[0] << " vs " << one.loss[0];
  // The gradients and what follows them: within 1e-5 relative.
  double worst = 0;
  for (size_t i = 0; i < kSteps; ++i) {
    const double rl = std::fabs(a.loss[i] - one.loss[i]) / one.loss[i];
    const double rg = std::fabs(a.grad_norm[i] - one.grad_norm[i]) / one.grad_norm[i];
    EXPECT_LE(rl, 1e-5) << name << " loss, step " << i + 1;
    EXPECT_LE(rg, 1e-5) << name << " grad_norm, step " << i + 1;
    worst = std::max({worst, rl, rg});
  }
  for (size_t i = 0; i < one.val_loss.size(); ++i)
    EXPECT_LE(std::fabs(a.val_loss[i] - one.val_loss[i]) / one.val_loss[i], 1e-5) << name << " val_loss " << i;
  std::printf("%s: forward bitwise; losses and grad norms within %.3g relative of 1 rank\n", name.c_str(), worst);
  // Run to run: the same bits.
  ASSERT_EQ(b.loss.size(), kSteps) << name;
  for (size_t i = 0; i < kSteps; ++i) {
    EXPECT_TRUE(same_bits(a.loss[i], b.loss[i])) << name << " run to run, step " << i + 1;
    EXPECT_TRUE(same_bits(a.grad_norm[i], b.grad_norm[i])) << name << " run to run, step " << i + 1;
  }
  ASSERT_FALSE(a.weights.empty()) << name;
  EXPECT_EQ(a.weights.size(), one.weights.size()) << name << ": the export is not the full model";
  EXPECT_TRUE(a.weights == b.weights) << name << ": final weights differ run to run";
  // Not the 1-rank bits after the updates (the gradients' sums are in another order);
  // the f32 losses, rounded from slightly different weights, often are.
  EXPECT_FALSE(a.weights == one.weights) << name << ": the final weights have the 1-rank bits (is CP running?)";
}

}  // namespace

TEST(ContextParallel, TwoRanksForwardBitwiseAndCloseToOne) {
  expect_forward_bitwise_and_close(2, "cp2", {"--parallelism.context_parallel_degree=2"});
}

TEST(ContextParallel, FsdpTwoByCpTwoForwardBitwiseAndCloseToOne) {
  expect_forward_bitwise_and_close(
      4, "fsdp2_cp2", {"--parallelism.context_parallel_degree=2", "--parallelism.data_parallel_shard_degree=2"});
}

// CP 2 × TP 2 on 4 ranks (vocabulary 260, so that tp divides it), without and with
// sequence parallelism, against one process. Each cp rank's tokens run through the tp
// model (heads, FFN columns and vocabulary split over tp), its attention gathering K/V
// of its local heads over cp; the loss is the cp ranks' vocabulary-parallel sums added
// in cp rank order. Not bitwise equal to one rank (TP's rowwise sums over K/P columns,
// tp_train_test.cpp, and CP's gradient sums), so TP's bounds: every loss and the
// validation losses within 1e-4 of one rank, grad norms within 1e-4 relative, the
// validation loss before training (a forward) within 1e-5 relative; and bitwise equal
// run to run (losses, grad norms, final weights gathered over tp and dp_shard × cp).
TEST(ContextParallel, CpTwoByTpTwoCloseToOneAndRepeatable) {
  const std::vector<std::string> v260 = {"--model.vocab_size=260"};
  const RunResult one = run_train(0, "cptp_one", v260);
  ASSERT_EQ(one.loss.size(), kSteps) << one.log;
  for (const bool sp : {false, true}) {
    const std::string name = sp ? "cp2_tp2_sp" : "cp2_tp2";
    std::vector<std::string> args = {"--model.vocab_size=260", "--parallelism.context_parallel_degree=2",
                                     "--parallelism.tensor_parallel_degree=2"};
    if (sp) args.push_back("--parallelism.enable_sequence_parallel=true");
    const RunResult a = run_train(4, name + "_a", args), b = run_train(4, name + "_b", args);
    ASSERT_EQ(a.loss.size(), kSteps) << a.log;
    ASSERT_EQ(b.loss.size(), kSteps) << b.log;
    EXPECT_TRUE(a.logged_positive("cp_comm_bytes")) << name;
    EXPECT_TRUE(a.logged_positive("tp_comm_bytes")) << name;
    ASSERT_EQ(a.val_loss.size(), one.val_loss.size()) << name;
    EXPECT_LE(std::fabs(a.val_loss[0] - one.val_loss[0]) / one.val_loss[0], 1e-5) << name << " forward";
    double worst = 0;
    for (size_t i = 0; i < kSteps; ++i) {
      EXPECT_LE(std::fabs(a.loss[i] - one.loss[i]), 1e-4) << name << " step " << i + 1;
      EXPECT_LE(std::fabs(a.grad_norm[i] - one.grad_norm[i]), 1e-4 * one.grad_norm[i]) << name << " step " << i + 1;
      worst = std::max(worst, std::fabs(a.loss[i] - one.loss[i]));
      EXPECT_TRUE(same_bits(a.loss[i], b.loss[i])) << name << " run to run, step " << i + 1;
      EXPECT_TRUE(same_bits(a.grad_norm[i], b.grad_norm[i])) << name << " run to run, step " << i + 1;
    }
    for (size_t i = 0; i < one.val_loss.size(); ++i)
      EXPECT_LE(std::fabs(a.val_loss[i] - one.val_loss[i]), 1e-4) << name << " val_loss " << i;
    std::printf("%s: losses within %.3g of 1 rank\n", name.c_str(), worst);
    ASSERT_FALSE(a.weights.empty()) << name;
    EXPECT_EQ(a.weights.size(), one.weights.size()) << name << ": the export is not the full model";
    EXPECT_TRUE(a.weights == b.weights) << name << ": final weights differ run to run";
    EXPECT_FALSE(a.weights == one.weights) << name << ": the final weights have the 1-rank bits";
  }
}

TEST(ContextParallel, RefusedCombinationsFailOnEveryRankBeforeWork) {
  struct Case {
    int np;
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {2,
       {"--recipe", "qwen3_next_debugmodel"},
       "parallelism.context_parallel_degree=2: layer 0 is a gdn layer; context parallelism supports gqa attention "
       "layers only"},
  };
  const std::string dump = fresh_dir("refused");
  for (const Case& c : cases) {
    std::vector<std::string> args = {"train", "--training.steps=2", "--parallelism.context_parallel_degree=2",
                                     "--job.dump_folder=" + dump};
    args.insert(args.end(), c.args.begin(), c.args.end());
    expect_refused_on_every_rank(c.np, args, c.message, dump + "/log.txt");
  }
}
