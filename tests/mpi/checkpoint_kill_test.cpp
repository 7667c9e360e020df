// kill -9 of one rank while a distributed checkpoint is being written (ctest label mpi):
// `titan train` on 2 FSDP ranks saves asynchronously every step, so a write is nearly
// always in flight; the test kills rank 0 or rank 1 (SIGKILL, no handler runs) when the
// newest step-N directory exists without its index. Then:
//   - mpirun ends (the other rank does not hang) with a non-zero code;
//   - the newest published checkpoint (MANIFEST.json present) loads, and the cut-short
//     directory is not one (no index: not a checkpoint);
//   - a new start on 2 ranks removes the cut-short directory, resumes from the previous
//     checkpoint and ends with the weights of a 1-rank run that was never killed
//     (HF export, byte for byte: FSDP 2 is bitwise equal to one rank, and the resume
//     reads back the same bits, checkpoint_resume_test.cpp).
// The same on 2 TP ranks (each writing its colwise/rowwise pieces) and on 2 PP ranks
// (each writing its stage's tensors), against an uninterrupted run of that layout.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/mpi/mpi_run.h"
#include "titan/checkpoint/train_checkpoint.h"

using namespace titan::test;

namespace {

constexpr int kSteps = 30;

std::vector<std::string> train_args(const std::string& dump, const std::string& interval,
                                    const std::vector<std::string>& extra) {
  std::vector<std::string> a = {"train",
          "--recipe",
          "debugmodel",
          "--training.steps=" + std::to_string(kSteps),
          "--training.local_batch_size=2",
          "--training.global_batch_size=4",
          "--validation.enabled=false",
          "--metrics.log_freq=1000",
          "--checkpoint.enable=true",
          "--checkpoint.interval=" + interval,
          "--checkpoint.async_mode=async",
          "--checkpoint.keep_latest_k=2",
          "--checkpoint.export_hf=true",
          "--job.dump_folder=" + dump};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// step -> published (MANIFEST.json present and complete).
std::map<int64_t, bool> step_dirs(const std::string& folder) {
  std::map<int64_t, bool> out;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(folder, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("step-", 0) != 0) continue;
    try {
      out[std::stoll(n.substr(5))] = titan::CheckpointManager::is_valid(e.path().string());
    } catch (...) {
    }
  }
  return out;
}

// The pid of MPI rank `rank` among the descendants of `root` (0 if not found).
pid_t rank_pid(pid_t root, int rank) {
  std::vector<pid_t> frontier = {root}, all;
  while (!frontier.empty()) {
    std::vector<pid_t> next;
    for (auto& e : fs::directory_iterator("/proc")) {
      const std::string n = e.path().filename().string();
      if (n.empty() || !std::isdigit(static_cast<unsigned char>(n[0]))) continue;
      const std::string stat = file_bytes(e.path().string() + "/stat");
      const size_t close = stat.rfind(')');
      if (close == std::string::npos) continue;
      int ppid = 0;
      char state = 0;
      if (std::sscanf(stat.c_str() + close + 1, " %c %d", &state, &ppid) != 2) continue;
      for (pid_t f : frontier)
        if (ppid == f) next.push_back(static_cast<pid_t>(std::stol(n)));
    }
    all.insert(all.end(), next.begin(), next.end());
    frontier = next;
  }
  const std::string want = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
  for (pid_t p : all) {
    const std::string env = file_bytes("/proc/" + std::to_string(p) + "/environ");
    size_t at = 0;
    for (size_t z; (z = env.find('\0', at)) != std::string::npos; at = z + 1)
      if (env.compare(at, z - at, want) == 0) return p;
  }
  return 0;
}

// The final weights of a run that is never killed, on np ranks (0: one process).
std::string uninterrupted_weights(int np, const std::vector<std::string>& extra) {
  const std::string dump = fresh_dir("kill_straight" + std::to_string(np));
  const std::string log = dump + "/log.txt";
  EXPECT_EQ(run(titan_argv(np, train_args(dump, "1000", extra)), log), 0) << file_bytes(log);
  return file_bytes(dump + "/hf/model.safetensors");
}

// Kills rank `victim` of a 2-rank run (layout `extra`) mid-save; the resumed run must end
// with `reference`'s final weights.
void kill_rank_mid_save(int victim, const std::vector<std::string>& extra, const std::string& reference,
                        const std::string& name) {
  const std::string dump = fresh_dir(name);
  const std::string ck = dump + "/checkpoint";
  bool hit = false;
  for (int attempt = 0; attempt < 5 && !hit; ++attempt) {
    fs::remove_all(dump);
    fs::create_directories(dump);
    Proc p(titan_argv(2, train_args(dump, "1", extra)), dump + "/run1.log");
    bool killed = false;
    while (!p.exited()) {
      const auto dirs = step_dirs(ck);
      int64_t valid_max = -1, newest = -1;
      for (auto& [s, ok] : dirs) {
        newest = std::max(newest, s);
        if (ok) valid_max = std::max(valid_max, s);
      }
      if (!killed && valid_max >= 2 && newest > valid_max) {
        const pid_t pid = rank_pid(p.pid, victim);
        if (pid > 0 && ::kill(pid, SIGKILL) == 0) killed = true;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
    ASSERT_TRUE(killed || p.exit_code() == 0) << p.output();
    if (!killed) continue;  // finished before the kill: try again
    // mpirun noticed the dead rank and ended the job (no hang: exited() returned).
    EXPECT_NE(p.exit_code(), 0) << p.output();
    for (auto& [s, ok] : step_dirs(ck)) hit = hit || !ok;  // the kill cut a write short
  }
  ASSERT_TRUE(hit) << "no kill landed inside a checkpoint write in 5 attempts";

  // The previous checkpoint is published and loads (assembled from both ranks' files).
  const auto latest = titan::CheckpointManager::latest(ck);
  ASSERT_TRUE(latest.has_value());
  const titan::LoadedCheckpoint prev = titan::CheckpointManager::load(*latest);
  EXPECT_GE(prev.state.step, 2);
  EXPECT_FALSE(prev.model.empty());
  int64_t incomplete = -1;
  for (auto& [step, ok] : step_dirs(ck))
    if (!ok) incomplete = step;
  EXPECT_GT(incomplete, prev.state.step);

  // A new start cleans up, resumes from the previous checkpoint and ends with the
  // weights of the run that was never killed.
  const std::string log = dump + "/run2.log";
  ASSERT_EQ(run(titan_argv(2, train_args(dump, "1000", extra)), log), 0) << file_bytes(log);
  const std::string out = file_bytes(log);
  EXPECT_NE(out.find("removed incomplete checkpoint " + ck + "/step-" + std::to_string(incomplete)),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("resumed from " + *latest + " (step " + std::to_string(prev.state.step) + ")"),
            std::string::npos)
      << out;
  for (auto& [step, ok] : step_dirs(ck)) EXPECT_TRUE(ok) << "step-" << step << " left incomplete";
  const std::string w = file_bytes(dump + "/hf/model.safetensors");
  ASSERT_FALSE(reference.empty());
  EXPECT_TRUE(w == reference) << "final weights differ from the uninterrupted run";
}

}  // namespace

const std::string& one_rank_weights() {
  static const std::string w = uninterrupted_weights(0, {});
  return w;
}

TEST(DistributedCheckpointKill, KillRank1DuringSave) { kill_rank_mid_save(1, {}, one_rank_weights(), "kill1"); }
TEST(DistributedCheckpointKill, KillRank0DuringSave) { kill_rank_mid_save(0, {}, one_rank_weights(), "kill0"); }
// TP 2: the resumed run ends with the weights of an uninterrupted TP 2 run (TP is
// bitwise equal run to run, and a same-layout resume reads back the same bits,
// tp_checkpoint_test.cpp). Vocabulary 260 so that tp 2 divides it.
TEST(DistributedCheckpointKill, KillRank1DuringTpSave) {
  const std::vector<std::string> tp = {"--parallelism.tensor_parallel_degree=2", "--model.vocab_size=260"};
  kill_rank_mid_save(1, tp, uninterrupted_weights(2, tp), "kill_tp1");
}
// PP 2 (1F1B, untied embeddings, the 4 rows of a step as 2 microbatches of 2): each rank
// writes its stage's tensors; the resumed run ends with the weights of an uninterrupted
// PP 2 run (PP is bitwise equal run to run, and a same-layout resume reads back the same
// bits, pipeline_checkpoint_test.cpp).
TEST(DistributedCheckpointKill, KillRank1DuringPpSave) {
  const std::vector<std::string> pp = {"--parallelism.pipeline_parallel_degree=2", "--model.tie_embeddings=false",
                                       "--training.local_batch_size=4",
                                       "--parallelism.pipeline_parallel_microbatch_size=2"};
  kill_rank_mid_save(1, pp, uninterrupted_weights(2, pp), "kill_pp1");
}
