// Distributed checkpoints under pipeline parallelism (ctest label mpi): `titan train` on
// the debugmodel with 4 layers and untied embeddings, the global batch of 8 rows in
// microbatches of 2, saving every 3 of 6 steps (asynchronously).
//
// Each pp rank writes the parameters and AdamW moments of the stages it holds (with
// FSDP, its rows of them) under the 1-rank model's names, so the index names every
// tensor once and a load on any layout reads the pieces it needs.
//
//  - Same layout: PP 2 with GPipe, 1F1B and Interleaved1F1B (4 stages, 2 per rank), and
//    PP 2 × FSDP 2 and PP 2 × DP-replicate 2, cut back to step 3 and resumed: steps
//    4..6 and the final weights (HF export) bitwise equal to the uninterrupted run.
//  - Other layouts: the PP 2 (1F1B) checkpoint resumed at 1 rank; the 1-rank checkpoint
//    resumed at PP 2 (1F1B) and PP 2 (Interleaved1F1B); the FSDP 2 checkpoint at PP 2;
//    the PP 2 × FSDP 2 and PP 2 × DP-replicate 2 checkpoints at 1 rank. Steps 4..6 and
//    the final weights bitwise equal to the uninterrupted 1-rank run.
//  - A rank skips only the other stages' tensors: a checkpoint tensor that no stage of
//    the model has is an error on every rank.
//
// Where the equality comes from: the checkpoint holds each element of the weights and of
// the AdamW moments once, and a load copies the boxes back (never recomputed), so every
// layout reads back the bits that were saved; the loader's position does not depend on
// the layout (every layout here draws 2-row microbatches in the 1-rank order); and the
// training steps of PP 2 (each schedule, × FSDP 2, × DP-replicate 2) and of FSDP 2 are
// bitwise equal to the 1-rank run that accumulates the same 4 microbatches
// (pipeline_train_test.cpp, fsdp_train_test.cpp), which this test checks again for the
// uninterrupted runs it uses.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/mpi/checkpoint_run.h"
#include "titan/checkpoint/train_checkpoint.h"

using namespace titan::test;
using namespace titan::test::ckpt;

namespace {

std::vector<std::string> job(const std::vector<std::string>& layout) {
  std::vector<std::string> a = {"--recipe", "debugmodel", "--model.n_layers=4", "--model.tie_embeddings=false",
                                "--training.global_batch_size=8"};
  a.insert(a.end(), layout.begin(), layout.end());
  return a;
}
// 1 rank: local batches of 2 rows, 4 accumulated per step.
const std::vector<std::string> kOne = job({"--training.local_batch_size=2"});
const std::vector<std::string> kFsdp2 =
    job({"--training.local_batch_size=2", "--parallelism.data_parallel_shard_degree=2"});
// PP 2: the step's 8 rows as 4 pipeline microbatches of 2 (× FSDP 2: 4 rows, 2 microbatches per dp rank).
std::vector<std::string> pp2(const std::string& schedule, int local_batch = 8, const std::vector<std::string>& more = {}) {
  std::vector<std::string> a = {"--parallelism.pipeline_parallel_degree=2",
                                "--parallelism.pipeline_parallel_schedule=" + schedule,
                                "--parallelism.pipeline_parallel_microbatch_size=2",
                                "--training.local_batch_size=" + std::to_string(local_batch)};
  a.insert(a.end(), more.begin(), more.end());
  return job(a);
}
const std::vector<std::string> kPp1f1b = pp2("1F1B");
const std::vector<std::string> kPpInterleaved = pp2("Interleaved1F1B");
const std::vector<std::string> kPpFsdp = pp2("1F1B", 4, {"--parallelism.data_parallel_shard_degree=2"});

const TrainRun& one_rank() { return straight(0, "pp_ck_one", kOne); }

// The uninterrupted run `r` is bitwise equal to the 1-rank run (the premise of the
// resharding checks).
void expect_like_one_rank(const TrainRun& r, const std::string& what) {
  const TrainRun& one = one_rank();
  ASSERT_EQ(one.loss.size(), static_cast<size_t>(kSteps)) << one.out;
  ASSERT_EQ(r.loss.size(), one.loss.size()) << what << "\n" << r.out;
  for (const auto& [s, l] : one.loss)
    EXPECT_TRUE(same_bits(r.loss.at(s), l)) << what << " step " << s << ": " << r.loss.at(s) << " vs " << l;
  ASSERT_FALSE(one.weights.empty());
  EXPECT_TRUE(r.weights == one.weights) << what << ": final weights differ from the 1-rank run";
}

// `from`'s step-3 checkpoint resumed on np ranks with `layout`: steps 4..6 and the final
// weights bitwise equal to the uninterrupted 1-rank run.
void expect_reshard_to_one_rank_bits(const TrainRun& from, int np, const std::string& name,
                                     const std::vector<std::string>& layout) {
  const TrainRun r = resume(from, kInterval, np, name, layout, kSteps);
  expect_next_losses(r, one_rank(), 0, name);
  ASSERT_FALSE(one_rank().weights.empty());
  EXPECT_TRUE(r.weights == one_rank().weights) << name << ": final weights differ from the uninterrupted 1-rank run";
}

}  // namespace

TEST(PipelineCheckpoint, OneFOneBSameLayoutResumeIsBitwise) {
  expect_like_one_rank(straight(2, "pp_ck_1f1b", kPp1f1b), "PP 2 1F1B");
  expect_same_layout_resume(2, "pp_ck_1f1b", kPp1f1b);
}

TEST(PipelineCheckpoint, Interleaved1F1BSameLayoutResumeIsBitwise) {
  // 4 stages: 0 and 2 on rank 0, 1 and 3 on rank 1; each rank saves two stages.
  expect_like_one_rank(straight(2, "pp_ck_interleaved", kPpInterleaved), "PP 2 Interleaved1F1B");
  expect_same_layout_resume(2, "pp_ck_interleaved", kPpInterleaved);
}

TEST(PipelineCheckpoint, GPipeSameLayoutResumeIsBitwise) {
  expect_same_layout_resume(2, "pp_ck_gpipe", pp2("GPipe"));
}

TEST(PipelineCheckpoint, IndexNamesEveryTensorOnceFromItsStage) {
  // PP 2 (1F1B: the embedding and layers [0, 2) on rank 0, layers [2, 4) and the head on
  // rank 1, pipeline_schedule.h): one shard per tensor, in the file of the rank holding
  // its stage, its AdamW moments beside it.
  const TrainRun& src = straight(2, "pp_ck_1f1b", kPp1f1b);
  const nlohmann::json man = nlohmann::json::parse(file_bytes(src.dump + "/checkpoint/step-3/MANIFEST.json"));
  EXPECT_EQ(man["mesh"]["pp"], 2);
  const auto& t = man["tensors"];
  const auto file_of = [&](const std::string& key) {
    EXPECT_EQ(t[key]["shards"].size(), 1u) << key;
    return t[key]["shards"][0]["file"].get<std::string>();
  };
  const std::string r0 = "shard-00000-of-00002.safetensors", r1 = "shard-00001-of-00002.safetensors";
  EXPECT_EQ(file_of("model/tok_embeddings.weight"), r0);
  EXPECT_EQ(file_of("model/layers.0.attention.wq.weight"), r0);
  EXPECT_EQ(file_of("optimizer/layers.0.attention.wq.weight.exp_avg"), r0);
  EXPECT_EQ(file_of("model/layers.3.feed_forward.w2.weight"), r1);
  EXPECT_EQ(file_of("model/output.weight"), r1);
  EXPECT_EQ(file_of("optimizer/output.weight.exp_avg_sq"), r1);
  // The 1-rank checkpoint's tensors, no more, no fewer.
  const titan::LoadedCheckpoint one = titan::CheckpointManager::load(one_rank().dump + "/checkpoint/step-3");
  size_t model = 0, opt = 0;
  for (auto& [k, v] : t.items()) (k.rfind("model/", 0) == 0 ? model : opt) += 1;
  EXPECT_EQ(model, one.model.size());
  EXPECT_EQ(opt, one.optimizer.size());
  for (const auto& [name, v] : one.model) EXPECT_TRUE(t.contains("model/" + name)) << name;
  for (const auto& [name, v] : one.optimizer) EXPECT_TRUE(t.contains("optimizer/" + name)) << name;
}

TEST(PipelineCheckpoint, Pp2ToOneRankIsBitwise) {
  expect_reshard_to_one_rank_bits(straight(2, "pp_ck_1f1b", kPp1f1b), 0, "pp2_to_1", kOne);
}

TEST(PipelineCheckpoint, OneRankToPp2IsBitwise) {
  expect_reshard_to_one_rank_bits(one_rank(), 2, "1_to_pp2", kPp1f1b);
  expect_reshard_to_one_rank_bits(one_rank(), 2, "1_to_pp2_interleaved", kPpInterleaved);
}

TEST(PipelineCheckpoint, Fsdp2ToPp2IsBitwise) {
  const TrainRun& fsdp2 = straight(2, "pp_ck_fsdp2", kFsdp2);
  expect_like_one_rank(fsdp2, "FSDP 2");
  expect_reshard_to_one_rank_bits(fsdp2, 2, "fsdp2_to_pp2", kPp1f1b);
}

TEST(PipelineCheckpoint, Pp2TimesFsdp2SameLayoutAndToOneRank) {
  // pp 2 × dp_shard 2 on 4 ranks: each rank writes its FSDP rows of its stage's tensors.
  const TrainRun& src = straight(4, "pp_ck_pp2fsdp2", kPpFsdp);
  expect_like_one_rank(src, "PP 2 x FSDP 2");
  const nlohmann::json man = nlohmann::json::parse(file_bytes(src.dump + "/checkpoint/step-3/MANIFEST.json"));
  const auto& wq = man["tensors"]["model/layers.0.attention.wq.weight"];
  EXPECT_EQ(wq["shards"].size(), 2u);
  EXPECT_EQ(wq["placements"][0]["placement"], "Shard(0)");
  expect_same_layout_resume(4, "pp_ck_pp2fsdp2", kPpFsdp);
  expect_reshard_to_one_rank_bits(src, 0, "pp2fsdp2_to_1", kOne);
}

TEST(PipelineCheckpoint, TensorOfNoStageIsRefusedOnEveryRank) {
  // A rank skips the checkpoint tensors of the other stages only: resumed with 2 layers,
  // the 4-layer PP 2 checkpoint holds layers 2 and 3, which no stage has.
  const TrainRun& src = straight(2, "pp_ck_1f1b", kPp1f1b);
  const std::string dump = fresh_dir("pp_ck_other_model");
  const std::string d = dump + "/checkpoint/step-3";
  fs::create_directories(dump + "/checkpoint");
  fs::copy(src.dump + "/checkpoint/step-3", d, fs::copy_options::recursive);
  std::vector<std::string> two_layers = kPp1f1b;
  two_layers.push_back("--model.n_layers=2");
  expect_refused_on_every_rank(2, train_argv(dump, two_layers),
                               "checkpoint " + d + "/MANIFEST.json: model tensor 'layers.2.attention.wk.weight' [32, 64] "
                               "is not in the model (a checkpoint of another model?)",
                               dump + "/log.txt");
}

TEST(PipelineCheckpoint, Pp2TimesDpReplicate2SameLayoutAndToOneRank) {
  // pp 2 × dp_replicate 2 on 4 ranks: the two replicas of a stage hold the same tensors,
  // which the lower world rank writes (one shard per tensor).
  const std::vector<std::string> layout = pp2("1F1B", 4, {"--parallelism.data_parallel_replicate_degree=2"});
  const TrainRun& src = straight(4, "pp_ck_pp2ddp2", layout);
  expect_like_one_rank(src, "PP 2 x DP-replicate 2");
  const nlohmann::json man = nlohmann::json::parse(file_bytes(src.dump + "/checkpoint/step-3/MANIFEST.json"));
  EXPECT_EQ(man["tensors"]["model/layers.0.attention.wq.weight"]["shards"].size(), 1u);
  EXPECT_EQ(man["files"].size(), 3u) << man["files"].dump();  // 2 shard files + state.json
  expect_same_layout_resume(4, "pp_ck_pp2ddp2", layout);
  expect_reshard_to_one_rank_bits(src, 0, "pp2ddp2_to_1", kOne);
}
