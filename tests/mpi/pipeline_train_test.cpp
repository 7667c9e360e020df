// Pipeline parallelism under mpirun against one process (ctest label mpi): `titan
// train` on the debugmodel (untied embeddings) with the same global batch (8 rows),
// microbatches of 2 rows and seeds. The 1-rank run has local_batch_size 2, so it
// accumulates the gradients of the step's 4 microbatches j = 0..3 in order; the PP
// runs have local_batch_size 8 (4 / 2 with FSDP 2) cut into pipeline microbatches of
// pipeline_parallel_microbatch_size 2, drawn in the same order.
//
// Where the equality comes from:
//  - a stage runs the 1-rank forward's modules on the same rows with the same
//    batch-invariant kernels, and receives its input as the bits the previous stage
//    computed, so activations, losses and every microbatch's gradients are the 1-rank
//    bits (the gradient at a stage boundary is the engine's sum of the same
//    contributions in the same node order);
//  - every schedule runs each stage's backwards in microbatch order, so AccumulateGrad
//    adds the microbatch gradients as the 1-rank run does;
//  - the loss is Σ token CE seeded with float(1 / valid) over the step's targets, the
//    1-rank arithmetic; the logged loss adds the microbatch sums in microbatch order;
//  - the gradient norm adds each parameter's ‖g‖² (the same 4096-element blocks) in
//    the model's parameter order over all stages, so clipping (max_norm 0.8, active on
//    these steps: checked) scales by the 1-rank factor; AdamW is elementwise.
// With FSDP 2 inside each stage, dp rank q trains microbatches j ≡ q (mod 2) and the
// shard gradients are summed in dp-rank order (fsdp.h): the 1-rank order again.
// Compared by memcmp: each step's loss and grad_norm, the validation loss, and the final
// weights (the HF export's model.safetensors, every stage's parameters gathered on
// rank 0).
#include <gtest/gtest.h>

#include <map>

#include "tests/mpi/mpi_run.h"

using namespace titan::test;

namespace {

std::vector<std::string> train_args(const std::string& dump, const std::vector<std::string>& extra) {
  std::vector<std::string> a = {"train",
                                "--recipe",
                                "debugmodel",
                                "--model.tie_embeddings=false",
                                "--training.steps=4",
                                "--training.global_batch_size=8",
                                "--training.max_norm=0.8",
                                "--validation.freq=4",
                                "--checkpoint.export_hf=true",
                                "--job.dump_folder=" + dump};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

struct RunResult {
  std::vector<double> loss, grad_norm, val_loss;
  std::string weights, log;
};

RunResult run_train(int np, const std::string& name, const std::vector<std::string>& extra) {
  const std::string dump = fresh_dir(name);
  const std::string log = dump + "/log.txt";
  const int rc = run(titan_argv(np, train_args(dump, extra)), log);
  RunResult r;
  r.log = file_bytes(log);
  EXPECT_EQ(rc, 0) << r.log;
  for (const auto& row : read_metrics(dump)) {
    if (row.contains("loss")) {
      r.loss.push_back(row["loss"].get<double>());
      r.grad_norm.push_back(row["grad_norm"].get<double>());
    }
    if (row.contains("val_loss")) r.val_loss.push_back(row["val_loss"].get<double>());
  }
  r.weights = file_bytes(dump + "/hf/model.safetensors");
  return r;
}

void expect_bitwise(const RunResult& one, const RunResult& many, const std::string& what) {
  ASSERT_EQ(one.loss.size(), 4u) << one.log;
  ASSERT_EQ(many.loss.size(), one.loss.size()) << what << "\n" << many.log;
  for (size_t i = 0; i < one.loss.size(); ++i) {
    EXPECT_TRUE(same_bits(one.loss[i], many.loss[i])) << what << " step " << i + 1 << ": " << one.loss[i] << " vs "
                                                      << many.loss[i];
    EXPECT_TRUE(same_bits(one.grad_norm[i], many.grad_norm[i]))
        << what << " step " << i + 1 << " grad_norm: " << one.grad_norm[i] << " vs " << many.grad_norm[i];
  }
  ASSERT_EQ(many.val_loss.size(), one.val_loss.size()) << what;
  for (size_t i = 0; i < one.val_loss.size(); ++i) EXPECT_TRUE(same_bits(one.val_loss[i], many.val_loss[i])) << what;
  ASSERT_FALSE(one.weights.empty());
  EXPECT_TRUE(one.weights == many.weights) << what << ": final weights differ";
}

// The 1-rank reference with n_layers layers: 4 microbatches of 2 rows per step.
const RunResult& one_rank(int n_layers) {
  static std::map<int, RunResult> cache;
  auto it = cache.find(n_layers);
  if (it == cache.end())
    it = cache
             .emplace(n_layers, run_train(0, "pp_one" + std::to_string(n_layers),
                                          {"--training.local_batch_size=2",
                                           "--model.n_layers=" + std::to_string(n_layers)}))
             .first;
  return it->second;
}

std::vector<std::string> pp_args(const std::string& schedule, int n_layers, int local_batch) {
  return {"--parallelism.pipeline_parallel_degree=2", "--parallelism.pipeline_parallel_schedule=" + schedule,
          "--parallelism.pipeline_parallel_microbatch_size=2",
          "--training.local_batch_size=" + std::to_string(local_batch), "--model.n_layers=" + std::to_string(n_layers)};
}

}  // namespace

TEST(Pipeline, ClippingIsActiveInTheReference) {
  // The grad-norm reduction is exercised through clipping: max_norm 0.8 binds on some step.
  bool clipped = false;
  for (double g : one_rank(2).grad_norm) clipped = clipped || g > 0.8;
  EXPECT_TRUE(clipped) << "no step has grad_norm > max_norm = 0.8";
}

TEST(Pipeline, GPipeTwoStagesBitwiseEqualToOne) {
  // 4 microbatches in one pipeline run: F0 F1 F2 F3 then B0 B1 B2 B3 on each stage.
  expect_bitwise(one_rank(2), run_train(2, "pp_gpipe", pp_args("GPipe", 2, 8)), "PP 2 GPipe");
}

TEST(Pipeline, OneFOneBTwoStagesBitwiseEqualToOne) {
  expect_bitwise(one_rank(2), run_train(2, "pp_1f1b", pp_args("1F1B", 2, 8)), "PP 2 1F1B");
}

TEST(Pipeline, OneFOneBWithGradientAccumulationBitwiseEqualToOne) {
  // local_batch_size 4: two pipeline runs of 2 microbatches per step, accumulated.
  expect_bitwise(one_rank(2), run_train(2, "pp_1f1b_accum", pp_args("1F1B", 2, 4)), "PP 2 1F1B, 2 runs");
}

TEST(Pipeline, Interleaved1F1BFourStagesOnTwoRanksBitwiseEqualToOne) {
  // 4 layers in 4 stages, stages 0 and 2 on rank 0, 1 and 3 on rank 1.
  expect_bitwise(one_rank(4), run_train(2, "pp_interleaved", pp_args("Interleaved1F1B", 4, 8)),
                 "PP 2 Interleaved1F1B");
}

TEST(Pipeline, Interleaved1F1BThreeStagesPerRankBitwiseEqualToOne) {
  // 10 layers, pipeline_parallel_layers_per_stage 2: ceil(12 / 2) = 6 stages, 3 per rank.
  std::vector<std::string> a = pp_args("Interleaved1F1B", 10, 8);
  a.push_back("--parallelism.pipeline_parallel_layers_per_stage=2");
  expect_bitwise(one_rank(10), run_train(2, "pp_interleaved3", a), "PP 2 Interleaved1F1B, 3 stages per rank");
}

TEST(Pipeline, TwoStagesTimesFsdpTwoBitwiseEqualToOne) {
  // pp 2 × dp_shard 2 on 4 ranks: local_batch_size 4 per dp rank, 2 microbatches each.
  std::vector<std::string> a = pp_args("1F1B", 2, 4);
  a.push_back("--parallelism.data_parallel_shard_degree=2");
  expect_bitwise(one_rank(2), run_train(4, "pp_fsdp", a), "PP 2 x FSDP 2");
}

TEST(Pipeline, OtherMicrobatchesGiveOtherBits) {
  // The check can fail: PP with one microbatch of 8 rows per step adds no microbatch
  // gradients and its GEMMs reduce over another K.
  const RunResult other = run_train(2, "pp_one_micro",
                                    {"--parallelism.pipeline_parallel_degree=2",
                                     "--parallelism.pipeline_parallel_microbatch_size=8",
                                     "--training.local_batch_size=8", "--model.n_layers=2"});
  ASSERT_EQ(other.loss.size(), 4u) << other.log;
  EXPECT_FALSE(same_bits(other.loss[3], one_rank(2).loss[3]) && other.weights == one_rank(2).weights);
}
