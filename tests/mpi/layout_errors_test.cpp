// Bad [parallelism] layouts under mpirun (ctest label mpi): one-line errors on every
// rank, exit code non-zero (2 from each rank, MPI_Abort ends the job), before any
// training step; and the zero degree that used to reach a division (SIGFPE).
#include <gtest/gtest.h>

#include "tests/mpi/mpi_run.h"

using namespace titan::test;

namespace {

std::vector<std::string> train_args(const std::string& dump, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> a = {"train", "--recipe", "debugmodel", "--training.steps=2", "--job.dump_folder=" + dump};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

}  // namespace

TEST(Layout, BadLayoutsFailOnEveryRankBeforeWork) {
  const std::string dump = fresh_dir("bad");
  struct Case {
    int np;
    std::vector<std::string> extra;
    std::string message;
  };
  const std::vector<Case> cases = {
      {2,
       {"--parallelism.data_parallel_shard_degree=4"},
       "parallelism: pipeline_parallel_degree (1) × data_parallel_replicate_degree (1) × data_parallel_shard_degree "
       "(4) × context_parallel_degree (1) × tensor_parallel_degree (1) = 4, but the world has 2 ranks (mpirun -np)"},
      {2,
       {"--parallelism.tensor_parallel_degree=2"},
       "parallelism.tensor_parallel_degree=2 does not divide the model's vocabulary size (259)"},
      {2,
       {"--parallelism.tensor_parallel_degree=2", "--model.vocab_size=260", "--model.ffn_hidden_dim=191"},
       "parallelism.tensor_parallel_degree=2 does not divide the model's FFN hidden width (191)"},
      {2,
       {"--parallelism.tensor_parallel_degree=2", "--model.vocab_size=260", "--model.n_heads=3",
        "--model.n_kv_heads=1", "--model.head_dim=16"},
       "parallelism.tensor_parallel_degree=2 does not divide the model's attention heads (3)"},
      {4,
       {"--parallelism.tensor_parallel_degree=4", "--model.vocab_size=260", "--model.n_kv_heads=4",
        "--parallelism.enable_sequence_parallel=true", "--training.seq_len=34"},
       "parallelism.enable_sequence_parallel=true: training.seq_len=34 must be a multiple of "
       "parallelism.tensor_parallel_degree=4 (each tp rank holds seq_len / tp rows of every sequence)"},
      {2,
       {"--parallelism.tensor_parallel_degree=2", "--model.n_kv_heads=1"},
       "parallelism.tensor_parallel_degree=2 does not divide the model's key/value heads (1)"},
      {2,
       {"--parallelism.pipeline_parallel_degree=2", "--parallelism.data_parallel_shard_degree=1",
        "--model.n_layers=1"},
       "parallelism.pipeline_parallel_degree=2 is more stages than the model's 1 layers"},
      {2,
       {"--parallelism.pipeline_parallel_degree=2", "--parallelism.pipeline_parallel_schedule=Interleaved1F1B",
        "--model.tie_embeddings=false"},
       "parallelism: 4 pipeline stages (pipeline_parallel_degree=2 × 2 per rank for Interleaved1F1B) are more "
       "stages than the model's 2 layers"},
      {2,
       {"--parallelism.pipeline_parallel_degree=2", "--parallelism.pipeline_parallel_schedule=Interleaved1F1B",
        "--parallelism.pipeline_parallel_layers_per_stage=2", "--model.tie_embeddings=false"},
       "parallelism.pipeline_parallel_schedule=Interleaved1F1B needs at least 2 stages per rank, but "
       "pipeline_parallel_layers_per_stage=2 gives 1 (use 1F1B, or fewer layers per stage)"},
      {2,
       {"--parallelism.pipeline_parallel_degree=2", "--parallelism.pipeline_parallel_schedule=ZeroBubble"},
       "parallelism.pipeline_parallel_schedule='ZeroBubble' is not one of: GPipe, 1F1B, Interleaved1F1B"},
      {2,
       {"--parallelism.pipeline_parallel_degree=2", "--parallelism.pipeline_parallel_microbatch_size=3"},
       "parallelism.pipeline_parallel_microbatch_size=3 does not divide training.local_batch_size=4"},
      {2,
       {"--parallelism.pipeline_parallel_degree=2", "--parallelism.pipeline_parallel_schedule=Interleaved1F1B",
        "--model.tie_embeddings=false", "--model.n_layers=4", "--parallelism.pipeline_parallel_microbatch_size=4"},
       "parallelism.pipeline_parallel_schedule=Interleaved1F1B needs the microbatches per run "
       "(training.local_batch_size 4 / pipeline_parallel_microbatch_size 4 = 1) to be a multiple of "
       "pipeline_parallel_degree=2"},
      {2,
       {"--parallelism.pipeline_parallel_degree=2"},
       "model.tie_embeddings=true with parallelism.pipeline_parallel_degree=2 is not supported: the embedding "
       "(first stage) and the LM head (last stage) would be one matrix on two ranks"},
      {2,
       {"--parallelism.context_parallel_degree=2", "--training.seq_len=34"},
       "training.seq_len=34 must be divisible by 2 × parallelism.context_parallel_degree = 4 (each cp rank takes one "
       "head and one tail chunk)"},
  };
  for (const Case& c : cases) {
    expect_refused_on_every_rank(c.np, train_args(dump, c.extra), c.message, dump + "/log.txt");
  }
}

TEST(Layout, ZeroDegreeIsAnErrorNotSigfpe) {
  const std::string dump = fresh_dir("zero");
  const std::string log = dump + "/log.txt";
  EXPECT_EQ(run(titan_argv(0, {"train", "--training.global_batch_size=8", "--parallelism.data_parallel_shard_degree=0",
                               "--print-config"}),
                log),
            2);
  EXPECT_EQ(file_bytes(log), "error: parallelism.data_parallel_shard_degree=0 must be -1 (the rest of the world) or >= 1\n");
  EXPECT_EQ(run(titan_argv(0, {"train", "--training.local_batch_size=4611686018427387904",
                               "--parallelism.data_parallel_replicate_degree=4", "--print-config"}),
                log),
            2);
  EXPECT_EQ(file_bytes(log), "error: training.local_batch_size=4611686018427387904 × data-parallel degree 4 overflows int64\n");
}
