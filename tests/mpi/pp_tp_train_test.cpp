// Tensor parallelism inside pipeline stages under mpirun against one process (ctest
// label mpi): the debugmodel with untied embeddings (tied embeddings and PP are refused)
// and vocabulary 260 (so that tp 2 divides it), 20 steps of the same global batch (8
// rows) in microbatches of 2 rows, the same seeds. PP 2 (1F1B) × TP 2 on 4 ranks, with
// and without sequence parallelism, and Interleaved1F1B (4 layers, 2 stages per pp rank)
// × TP 2 with SP:
//  - step 1's loss within 1e-5 relative of the 1-rank run's (the same weights, one
//    forward: only the tp sums' order differs);
//  - every step's loss (and the validation losses) within 1e-4 of the 1-rank run's,
//    the grad norm within 1e-4 relative (clipping at max_norm 0.8 binds on some steps:
//    checked, so the norm over pp × tp scales the update);
//  - bitwise equal run to run (losses, grad norms, the final weights of the HF export,
//    gathered over pp and tp on rank 0, the full model's size).
// Not bitwise equal to 1 rank (a rowwise GEMM over K/P columns per rank summed over
// ranks adds in another order, tp_train_test.cpp): the test checks that the bits differ,
// so it cannot pass by running the 1-rank code.
// Checkpoints: PP 2 × TP 2 resumed on its own layout continues bit for bit; its final
// checkpoint loaded on 1 rank exports the bytes the 4-rank run's HF export gathered
// (each stage's pieces named globally, placed by their tp boxes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "tests/mpi/checkpoint_run.h"
#include "tests/mpi/mpi_run.h"

using namespace titan::test;

namespace {

constexpr size_t kTrainSteps = 20;

const std::vector<std::string> kModel = {"--recipe", "debugmodel", "--model.vocab_size=260",
                                         "--model.tie_embeddings=false", "--training.global_batch_size=8"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::vector<std::string> kPpTp = {"--training.local_batch_size=8",
                                        "--parallelism.pipeline_parallel_degree=2",
                                        "--parallelism.pipeline_parallel_schedule=1F1B",
                                        "--parallelism.pipeline_parallel_microbatch_size=2",
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
  static const TrainOutcome r = run_train(0, "pptp_one", {"--training.local_batch_size=2"});
  return r;
}

void expect_close_and_repeatable(const TrainOutcome& one, const std::string& name,
                                 const std::vector<std::string>& layout) {
  const TrainOutcome a = run_train(4, name + "_a", layout), b = run_train(4, name + "_b", layout);
  EXPECT_TRUE(a.logged_positive("tp_comm_bytes")) << name << ": no tensor-parallel communication was logged";
  EXPECT_TRUE(a.logged_positive("pp_bytes")) << name << ": no pipeline traffic was logged";
  expect_close_to_one_rank_and_repeatable(name, one, a, b, kTrainSteps, 0.8);
}

}  // namespace

TEST(PipelineTensorParallel, PpTwoByTpTwoCloseToOneAndRepeatable) {
  // enable_sequence_parallel defaults to true (TorchTitan's default): off here.
  expect_close_and_repeatable(one_rank(), "pp2_tp2", with(kPpTp, {"--parallelism.enable_sequence_parallel=false"}));
}

TEST(PipelineTensorParallel, PpTwoByTpTwoSequenceParallelCloseToOneAndRepeatable) {
  expect_close_and_repeatable(one_rank(), "pp2_tp2_sp", with(kPpTp, {"--parallelism.enable_sequence_parallel=true"}));
}

TEST(PipelineTensorParallel, Interleaved1F1BByTpTwoCloseToOneAndRepeatable) {
  // 4 layers in 4 stages, 2 per pp rank, each split over tp 2 (SP).
  static const TrainOutcome one =
      run_train(0, "pptp_one4", {"--training.local_batch_size=2", "--model.n_layers=4"});
  std::vector<std::string> a = with(kPpTp, {"--model.n_layers=4", "--parallelism.enable_sequence_parallel=true"});
  for (std::string& s : a)
    if (s == "--parallelism.pipeline_parallel_schedule=1F1B") s = "--parallelism.pipeline_parallel_schedule=Interleaved1F1B";
  expect_close_and_repeatable(one, "pp2_interleaved_tp2_sp", a);
}

TEST(PipelineTensorParallel, CheckpointResumesOnItsLayoutAndLoadsOnOneRank) {
  using namespace titan::test::ckpt;
  const std::vector<std::string> layout = with(kModel, with(kPpTp, {"--parallelism.enable_sequence_parallel=true"}));
  expect_same_layout_resume(4, "pp2_tp2_sp", layout);
  // The final checkpoint on 1 rank, exported: the 4-rank run's gathered export.
  const TrainRun& src = straight(4, "pp2_tp2_sp", layout);
  ASSERT_FALSE(src.weights.empty()) << src.out;
  const TrainRun last = resume(src, ckpt::kSteps, 0, "pp2_tp2_sp_load_1", with(kModel, {"--training.local_batch_size=2"}),
                               ckpt::kSteps);
  EXPECT_TRUE(last.weights == src.weights) << "the PP x TP export differs from the 1-rank export of the same checkpoint";

  // The index: global names; stage 0 (world ranks 0, 1 = its tp ranks) writes the
  // embedding and layer 0, stage 1 (ranks 2, 3) layer 1, the norm and the LM head; tp
  // pieces placed by their boxes, a replicated norm written once.
  const nlohmann::json man = nlohmann::json::parse(file_bytes(src.dump + "/checkpoint/step-3/MANIFEST.json"));
  const auto& t = man["tensors"];
  const auto shards = [&](const std::string& name) {
    std::string out;
    for (const auto& s : t["model/" + name]["shards"])
      out += s["file"].get<std::string>().substr(6, 5) + "@" + std::to_string(s["offsets"][0].get<int64_t>()) + "," +
             std::to_string(s["offsets"].back().get<int64_t>()) + " ";
    return t["model/" + name]["placements"][0]["placement"].get<std::string>() + " " + out;
  };
  EXPECT_EQ(shards("tok_embeddings.weight"), "Shard(0) 00000@0,0 00001@130,0 ");
  EXPECT_EQ(shards("layers.0.attention.wo.weight"), "Shard(1) 00000@0,0 00001@0,32 ");
  EXPECT_EQ(shards("layers.1.feed_forward.w1.weight"), "Shard(0) 00002@0,0 00003@96,0 ");
  EXPECT_EQ(shards("norm.weight"), "Replicate() 00002@0,0 ");
  EXPECT_EQ(shards("output.weight"), "Shard(0) 00002@0,0 00003@130,0 ");
}
