// Helpers of the tests that launch `titan` under mpirun (ctest label mpi): a child
// process with its output in a log file, the mpirun command line, metrics rows.
#pragma once
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/util/test_files.h"
#include "tests/util/titan_exe.h"

namespace titan::test {

namespace fs = std::filesystem;

inline std::string mpiexec() {
  const char* m = std::getenv("TITAN_MPIEXEC");
  return m && *m ? m : "mpirun";
}

// argv of `titan ARGS` on np ranks (np = 0: one process without mpirun).
inline std::vector<std::string> titan_argv(int np, const std::vector<std::string>& args) {
  std::vector<std::string> all;
  if (np > 0) all = {mpiexec(), "--oversubscribe", "--allow-run-as-root", "-np", std::to_string(np)};
  all.push_back(titan_exe());
  all.insert(all.end(), args.begin(), args.end());
  return all;
}

struct Proc {
  pid_t pid = -1;
  std::string log;
  int status = 0;
  Proc(const std::vector<std::string>& argv, std::string log_path) : log(std::move(log_path)) {
    pid = fork();
    if (pid == 0) {
      setpgid(0, 0);  // its own group: the test can end mpirun and every rank at once
      FILE* f = std::fopen(log.c_str(), "w");
      if (f) {
        dup2(fileno(f), 1);
        dup2(fileno(f), 2);
      }
      std::vector<char*> a;
      for (auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
      a.push_back(nullptr);
      execvp(a[0], a.data());
      _exit(127);
    }
  }
  bool exited() {
    if (pid <= 0) return true;
    if (waitpid(pid, &status, WNOHANG) == pid) pid = -1;
    return pid <= 0;
  }
  void wait() {
    if (pid > 0 && waitpid(pid, &status, 0) == pid) pid = -1;
  }
  int exit_code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
  std::string output() const {
    std::ifstream f(log);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  ~Proc() {
    if (pid > 0) {
      ::kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
    }
  }
};

// Pids of the `titan` processes whose parent is `parent` (the ranks of an mpirun).
inline std::vector<pid_t> titan_children(pid_t parent) {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream f("/proc/" + std::string(e->d_name) + "/stat");
    std::string stat;
    std::getline(f, stat);
    const size_t close = stat.rfind(')');
    if (close == std::string::npos || stat.find("(titan)") == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(pid);
  }
  closedir(d);
  return out;
}

// The MPI world rank of a process started by mpirun (OMPI_COMM_WORLD_RANK in its
// environment), or -1.
inline int world_rank_of(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  const std::string env(std::istreambuf_iterator<char>(f), {});
  const std::string key = "OMPI_COMM_WORLD_RANK=";
  for (size_t at = 0; at < env.size(); at = env.find('\0', at) + 1) {
    if (env.compare(at, key.size(), key) == 0) return std::atoi(env.c_str() + at + key.size());
    if (env.find('\0', at) == std::string::npos) break;
  }
  return -1;
}

// Runs to the end; returns the exit code (output in log).
inline int run(const std::vector<std::string>& argv, const std::string& log) {
  Proc p(argv, log);
  p.wait();
  return p.exit_code();
}

// What a `titan train` run leaves for a bitwise comparison: the per-step losses and
// gradient norms and the validation losses of metrics.jsonl, and the final weights (the
// HF export's model.safetensors, written by rank 0).
struct TrainOutcome {
  std::vector<double> loss, grad_norm, val_loss;
  std::vector<nlohmann::json> rows;  // every metrics.jsonl row
  std::string weights, log;
  int rc = -1;
  // Whether some training row logged KEY (e.g. "tp_comm_bytes") with a value > 0.
  bool logged_positive(const std::string& key) const {
    for (const auto& row : rows)
      if (row.contains("loss") && row.contains(key) && row[key].get<double>() > 0) return true;
    return false;
  }
};

// `titan ARGS --job.dump_folder=<fresh dir NAME>` on np ranks (0: one process).
inline TrainOutcome run_titan_train(int np, const std::string& name, const std::vector<std::string>& args) {
  const std::string dump = fresh_dir(name);
  std::vector<std::string> a = args;
  a.push_back("--job.dump_folder=" + dump);
  TrainOutcome r;
  r.rc = run(titan_argv(np, a), dump + "/log.txt");
  r.log = file_bytes(dump + "/log.txt");
  if (r.rc != 0) return r;
  r.rows = read_metrics(dump);
  for (const auto& row : r.rows) {
    if (row.contains("loss")) {
      r.loss.push_back(row["loss"].get<double>());
      r.grad_norm.push_back(row["grad_norm"].get<double>());
    }
    if (row.contains("val_loss")) r.val_loss.push_back(row["val_loss"].get<double>());
  }
  r.weights = file_bytes(dump + "/hf/model.safetensors");
  return r;
}

// memcmp of every loss, gradient norm, validation loss and of the final weights.
inline void expect_same_training(const TrainOutcome& one, const TrainOutcome& many, size_t steps,
                                 const std::string& what) {
  ASSERT_EQ(one.rc, 0) << one.log;
  ASSERT_EQ(many.rc, 0) << what << ": " << many.log;
  ASSERT_EQ(one.loss.size(), steps) << one.log;
  ASSERT_EQ(many.loss.size(), one.loss.size()) << what;
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

// A layout whose sums run in another order than one rank's (TP, CP) against the 1-rank
// run `one`: run `a` has step 1's loss within 1e-5 relative, every loss and validation
// loss within 1e-4 and every grad norm within 1e-4 relative, while not every loss has
// the 1-rank bits (so the test cannot pass by running the 1-rank code); clipping at
// max_norm binds on some step of `one`; run `b` of the same layout equals `a` bitwise
// (losses, grad norms, validation losses, the full-size HF export). Prints the gaps.
inline void expect_close_to_one_rank_and_repeatable(const std::string& name, const TrainOutcome& one,
                                                    const TrainOutcome& a, const TrainOutcome& b, size_t steps,
                                                    double max_norm) {
  ASSERT_EQ(one.loss.size(), steps) << one.log;
  ASSERT_EQ(a.loss.size(), steps) << name << "\n" << a.log;
  bool clipped = false;
  for (double g : one.grad_norm) clipped = clipped || g > max_norm;
  EXPECT_TRUE(clipped) << "no step of the reference has grad_norm > max_norm = " << max_norm;
  EXPECT_LE(std::fabs(a.loss[0] - one.loss[0]), 1e-5 * std::fabs(one.loss[0]))
      << name << " step 1: " << a.loss[0] << " vs " << one.loss[0];
  bool all_same_bits = true;
  double worst = 0;
  for (size_t i = 0; i < steps; ++i) {
    EXPECT_LE(std::fabs(a.loss[i] - one.loss[i]), 1e-4) << name << " step " << i + 1;
    EXPECT_LE(std::fabs(a.grad_norm[i] - one.grad_norm[i]), 1e-4 * one.grad_norm[i]) << name << " step " << i + 1;
    all_same_bits = all_same_bits && same_bits(a.loss[i], one.loss[i]);
    worst = std::max(worst, std::fabs(a.loss[i] - one.loss[i]));
  }
  EXPECT_FALSE(all_same_bits) << name << ": every loss has the 1-rank bits (is the layout running?)";
  std::printf("%s: step-1 loss relative gap %.3g; %zu-step losses within %.3g of 1 rank\n", name.c_str(),
              std::fabs(a.loss[0] - one.loss[0]) / std::fabs(one.loss[0]), steps, worst);
  ASSERT_EQ(a.val_loss.size(), one.val_loss.size()) << name;
  for (size_t i = 0; i < one.val_loss.size(); ++i) EXPECT_LE(std::fabs(a.val_loss[i] - one.val_loss[i]), 1e-4) << name;
  ASSERT_EQ(b.loss.size(), steps) << name << "\n" << b.log;
  for (size_t i = 0; i < steps; ++i) {
    EXPECT_TRUE(same_bits(a.loss[i], b.loss[i])) << name << " run to run, step " << i + 1;
    EXPECT_TRUE(same_bits(a.grad_norm[i], b.grad_norm[i])) << name << " run to run, step " << i + 1;
  }
  for (size_t i = 0; i < a.val_loss.size() && i < b.val_loss.size(); ++i)
    EXPECT_TRUE(same_bits(a.val_loss[i], b.val_loss[i])) << name;
  ASSERT_FALSE(a.weights.empty()) << name;
  EXPECT_EQ(a.weights.size(), one.weights.size()) << name << ": the export is not the full model";
  EXPECT_TRUE(a.weights == b.weights) << name << ": final weights differ run to run";
}

// `titan ARGS` on np ranks (output in LOG) must fail before its first step, with the
// one-line error "error: rank R: MESSAGE" from every rank R.
// Returns the job's exit status.
inline int expect_refused_on_every_rank(int np, const std::vector<std::string>& args, const std::string& message,
                                        const std::string& log, const std::string& what = "") {
  const int rc = run(titan_argv(np, args), log);
  const std::string out = file_bytes(log);
  EXPECT_NE(rc, 0) << what << ":\n" << out;
  for (int r = 0; r < np; ++r)
    EXPECT_NE(out.find("error: rank " + std::to_string(r) + ": " + message + "\n"), std::string::npos)
        << what << ", rank " << r << ":\n"
        << out;
  EXPECT_EQ(out.find("step "), std::string::npos) << what << ": work started:\n" << out;
  return rc;
}

}  // namespace titan::test
