// Distributed checkpoints under mpirun (ctest label mpi): `titan train` on the debugmodel
// with the global batch of 8 rows in microbatches of 2, saving every 3 of 6 steps.
//
// Same layout: a run of 6 steps at FSDP 2, FSDP 4 and HSDP 2×2 is cut back to its step-3
// checkpoint and resumed. Other layouts: the FSDP 4 checkpoint is resumed at 1 rank, FSDP 2
// and HSDP 2×2, and the 1-rank checkpoint at FSDP 4. Every resumed run must give steps
// 4..6 with the losses (memcmp) and the final weights (the HF export, byte for byte) of
// an uninterrupted 1-rank run.
//
// Where the equality comes from: the checkpoint holds each element of the weights and of
// AdamW's moments exactly once, so every layout reads back the same bits (the pieces are
// boxes of the global tensor, copied, never recomputed); the data loader's position does
// not depend on the layout (every rank draws the whole global batch, trainer.cpp); and
// the training steps themselves are bitwise equal to one rank for FSDP and HSDP
// (fsdp_train_test.cpp: rank-ordered gradient sums, elementwise AdamW). A layout whose
// steps are not bitwise equal to one rank (TP, by its reduction order) would load the
// same bits but continue within its own tolerance.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/mpi/checkpoint_run.h"
#include "titan/checkpoint/distributed_checkpoint.h"
#include "titan/checkpoint/train_checkpoint.h"

using namespace titan::test;
using titan::test::ckpt::kInterval;
using titan::test::ckpt::kSteps;
using titan::test::ckpt::train_argv;
using titan::test::ckpt::TrainRun;

namespace {

const std::vector<std::string> kHsdp = {"--parallelism.data_parallel_replicate_degree=2",
                                        "--parallelism.data_parallel_shard_degree=2"};

std::vector<std::string> job(const std::vector<std::string>& extra) {
  std::vector<std::string> a = {"--recipe", "debugmodel", "--training.local_batch_size=2",
                                "--training.global_batch_size=8"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}
std::vector<std::string> train_args(const std::string& dump, const std::vector<std::string>& extra = {}) {
  return train_argv(dump, job(extra));
}
TrainRun run_train(int np, const std::string& dump, const std::vector<std::string>& extra = {}) {
  return ckpt::run_train(np, dump, job(extra));
}

// An uninterrupted run of `np` ranks (it saves at steps 3 and 6).
const TrainRun& straight(int np, const std::string& name, const std::vector<std::string>& extra = {}) {
  static std::map<std::string, TrainRun> runs;
  auto it = runs.find(name);
  if (it == runs.end()) it = runs.emplace(name, run_train(np, fresh_dir(name), extra)).first;
  return it->second;
}
const TrainRun& one_rank() { return straight(0, "one"); }
const TrainRun& fsdp4() { return straight(4, "fsdp4", {}); }

std::string step_dir(const TrainRun& r, int step) { return r.dump + "/checkpoint/step-" + std::to_string(step); }

// Resumes `np` ranks from a copy of `from`'s step-3 checkpoint and checks steps 4..6.
void expect_resume_matches(const TrainRun& from, int np, const std::string& name, const std::vector<std::string>& extra) {
  const TrainRun& ref = one_rank();
  ASSERT_EQ(ref.loss.size(), static_cast<size_t>(kSteps)) << ref.out;
  const std::string dump = fresh_dir(name);
  fs::create_directories(dump + "/checkpoint");
  fs::copy(step_dir(from, kInterval), dump + "/checkpoint/step-" + std::to_string(kInterval),
           fs::copy_options::recursive);
  const TrainRun r = run_train(np, dump, extra);
  EXPECT_NE(r.out.find("resumed from " + dump + "/checkpoint/step-3 (step 3)"), std::string::npos) << r.out;
  for (int s = kInterval + 1; s <= kSteps; ++s) {
    ASSERT_TRUE(r.loss.count(s)) << name << " step " << s << "\n" << r.out;
    EXPECT_TRUE(same_bits(r.loss.at(s), ref.loss.at(s)))
        << name << " step " << s << ": " << r.loss.at(s) << " vs " << ref.loss.at(s);
  }
  ASSERT_FALSE(ref.weights.empty());
  EXPECT_TRUE(r.weights == ref.weights) << name << ": final weights differ from the uninterrupted 1-rank run";
}

// A run of `np` ranks on `layout`, then its step-6 checkpoint deleted and the job
// started again in the same folder: it resumes from step 3.
void expect_same_layout_resume(int np, const std::string& name, const std::vector<std::string>& extra) {
  const TrainRun& full = straight(np, name, extra);
  const TrainRun& ref = one_rank();
  for (int s = 1; s <= kSteps; ++s)
    EXPECT_TRUE(full.loss.count(s) && same_bits(full.loss.at(s), ref.loss.at(s))) << name << " step " << s;
  expect_resume_matches(full, np, name + "_resumed", extra);
}

}  // namespace

TEST(DistributedCheckpoint, Fsdp2ResumeIsBitwise) { expect_same_layout_resume(2, "fsdp2", {}); }
TEST(DistributedCheckpoint, Fsdp4ResumeIsBitwise) { expect_same_layout_resume(4, "fsdp4", {}); }
TEST(DistributedCheckpoint, Hsdp2x2ResumeIsBitwise) { expect_same_layout_resume(4, "hsdp", kHsdp); }

TEST(DistributedCheckpoint, Fsdp4ToOneRank) { expect_resume_matches(fsdp4(), 0, "fsdp4_to_1", {}); }
TEST(DistributedCheckpoint, Fsdp4ToFsdp2) { expect_resume_matches(fsdp4(), 2, "fsdp4_to_2", {}); }
TEST(DistributedCheckpoint, Fsdp4ToHsdp2x2) { expect_resume_matches(fsdp4(), 4, "fsdp4_to_hsdp", kHsdp); }
TEST(DistributedCheckpoint, OneRankToFsdp4) { expect_resume_matches(one_rank(), 4, "1_to_fsdp4", {}); }

TEST(DistributedCheckpoint, IndexAndGatheredWeights) {
  // The FSDP 4 index: 4 shard files, each parameter cut into row boxes over dp_shard.
  const std::string dir = step_dir(fsdp4(), kInterval);
  const nlohmann::json man = nlohmann::json::parse(file_bytes(dir + "/MANIFEST.json"));
  EXPECT_EQ(man["format"], "titan-distributed");
  EXPECT_EQ(man["world_size"], 4);
  EXPECT_EQ(man["mesh"]["dp_shard"], 4);
  for (int r = 0; r < 4; ++r)
    EXPECT_TRUE(man["files"].contains("shard-0000" + std::to_string(r) + "-of-00004.safetensors")) << man["files"];
  const auto& wq = man["tensors"]["model/layers.0.attention.wq.weight"];
  ASSERT_TRUE(wq.is_object()) << man["tensors"].dump().substr(0, 2000);
  EXPECT_EQ(wq["placements"][0]["mesh_dim"], "dp_shard");
  EXPECT_EQ(wq["placements"][0]["placement"], "Shard(0)");
  EXPECT_EQ(wq["shards"].size(), 4u);
  EXPECT_EQ(man["tensors"]["optimizer/layers.0.attention.wq.weight.exp_avg"]["shards"].size(), 4u);
  EXPECT_EQ(man["tensors"]["optimizer/step"]["shards"].size(), 1u);  // a replicated scalar, written once

  // Gathered, the FSDP 4 pieces are the 1-rank checkpoint's tensors bit for bit.
  const titan::LoadedCheckpoint many = titan::CheckpointManager::load(dir);
  const titan::LoadedCheckpoint one = titan::CheckpointManager::load(step_dir(one_rank(), kInterval));
  EXPECT_EQ(many.state.step, kInterval);
  for (const auto& [a, b] : {std::pair{&many.model, &one.model}, std::pair{&many.optimizer, &one.optimizer}}) {
    ASSERT_EQ(a->size(), b->size());
    for (const auto& [name, t] : *b) {
      auto it = a->find(name);
      ASSERT_NE(it, a->end()) << name;
      ASSERT_EQ(it->second.shape(), t.shape()) << name;
      ASSERT_EQ(it->second.dtype(), t.dtype()) << name;
      EXPECT_EQ(std::memcmp(it->second.data_ptr(), t.data_ptr(), t.nbytes()), 0) << name;
    }
  }
}

TEST(DistributedCheckpoint, HsdpReplicasWriteOnce) {
  // Ranks 2 and 3 of HSDP 2×2 hold the same shards as ranks 0 and 1: they write no file.
  const nlohmann::json man =
      nlohmann::json::parse(file_bytes(step_dir(straight(4, "hsdp", kHsdp), kInterval) + "/MANIFEST.json"));
  std::vector<std::string> shards;
  for (auto& [f, size] : man["files"].items())
    if (f != "state.json") shards.push_back(f);
  EXPECT_EQ(shards, (std::vector<std::string>{"shard-00000-of-00004.safetensors", "shard-00001-of-00004.safetensors"}));
}

TEST(DistributedCheckpoint, BadCheckpointsFailOnEveryRank) {
  const TrainRun& src = straight(2, "fsdp2", {});
  struct Case {
    std::string name;
    std::function<void(const std::string&)> damage;  // applied to the copied step-3 directory
    std::vector<std::string> extra;
    std::string message;  // %D: the copied checkpoint directory
  };
  const std::vector<Case> cases = {
      {"shape", [](const std::string&) {}, {"--model.dim=128"},
       "checkpoint %D/MANIFEST.json: 'tok_embeddings.weight' has shape [259, 64], the model expects [259, 128]"},
      {"missing_shard", [](const std::string& d) { fs::remove(d + "/shard-00001-of-00002.safetensors"); }, {},
       "checkpoint %D: shard file %D/shard-00001-of-00002.safetensors listed in MANIFEST.json is missing"},
  };
  for (const Case& c : cases) {
    const std::string dump = fresh_dir("bad_" + c.name);
    const std::string d = dump + "/checkpoint/step-3";
    fs::create_directories(dump + "/checkpoint");
    fs::copy(step_dir(src, kInterval), d, fs::copy_options::recursive);
    c.damage(d);
    std::string msg = c.message;
    for (size_t p; (p = msg.find("%D")) != std::string::npos;) msg.replace(p, 2, d);
    expect_refused_on_every_rank(2, train_args(dump, c.extra), msg, dump + "/log.txt", c.name);
    EXPECT_TRUE(fs::exists(d + "/MANIFEST.json")) << "the damaged checkpoint was removed";
  }
}
