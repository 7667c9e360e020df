// Helpers of the distributed-checkpoint tests (ctest label mpi): `titan train` runs that
// save every kInterval of kSteps steps, resumes from a copy of one run's checkpoint on
// another layout, and comparisons of the next losses.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "tests/mpi/mpi_run.h"

namespace titan::test::ckpt {

constexpr int kSteps = 6, kInterval = 3;

struct TrainRun {
  std::string dump, out;
  std::map<int64_t, double> loss;
  std::string weights;
};

// The arguments of `titan train BASE --training.steps=STEPS` with checkpoints every
// kInterval steps and an HF export in `dump`; `base` holds the recipe and layout.
inline std::vector<std::string> train_argv(const std::string& dump, const std::vector<std::string>& base,
                                           int steps = kSteps) {
  std::vector<std::string> a = {"train", "--training.steps=" + std::to_string(steps), "--checkpoint.enable=true",
                                "--checkpoint.interval=" + std::to_string(kInterval), "--checkpoint.async_mode=async",
                                "--checkpoint.keep_latest_k=0", "--checkpoint.export_hf=true",
                                "--validation.enabled=false", "--job.dump_folder=" + dump};
  a.insert(a.end(), base.begin(), base.end());
  return a;
}

// train_argv on np ranks (0: one process): its losses by step and final weights.
inline TrainRun run_train(int np, const std::string& dump, const std::vector<std::string>& base, int steps = kSteps) {
  TrainRun r;
  r.dump = dump;
  const int rc = run(titan_argv(np, train_argv(dump, base, steps)), dump + "/log.txt");
  r.out = file_bytes(dump + "/log.txt");
  EXPECT_EQ(rc, 0) << r.out;
  for (const auto& row : read_metrics(dump))
    if (row.contains("loss")) r.loss[row["step"].get<int64_t>()] = row["loss"].get<double>();
  r.weights = file_bytes(dump + "/hf/model.safetensors");
  return r;
}

// An uninterrupted run, once per name.
inline const TrainRun& straight(int np, const std::string& name, const std::vector<std::string>& base) {
  static std::map<std::string, TrainRun> runs;
  auto it = runs.find(name);
  if (it == runs.end()) it = runs.emplace(name, run_train(np, fresh_dir("ckpt_" + name), base)).first;
  return it->second;
}

// np ranks started in a fresh folder holding a copy of `from`'s step-`step` checkpoint,
// training to `steps`.
inline TrainRun resume(const TrainRun& from, int step, int np, const std::string& name,
                       const std::vector<std::string>& base, int steps) {
  const std::string dump = fresh_dir("ckpt_" + name);
  const std::string d = "/checkpoint/step-" + std::to_string(step);
  fs::create_directories(dump + "/checkpoint");
  fs::copy(from.dump + d, dump + d, fs::copy_options::recursive);
  TrainRun r = run_train(np, dump, base, steps);
  EXPECT_NE(r.out.find("resumed from " + dump + d + " (step " + std::to_string(step) + ")"), std::string::npos)
      << r.out;
  return r;
}

// The HF export of the weights np ranks load from `from`'s step-kInterval checkpoint
// (a run with nothing left to train).
inline std::string loaded_weights(const TrainRun& from, int np, const std::string& name,
                                  const std::vector<std::string>& base) {
  const TrainRun r = resume(from, kInterval, np, name, base, kInterval);
  // metrics.jsonl holds the checkpoint's own step-3 row (restored on resume), nothing later.
  EXPECT_TRUE(r.loss.empty() || r.loss.rbegin()->first == kInterval) << name << ": trained although nothing was left";
  return r.weights;
}

// Steps kInterval+1..kSteps of `r` against `ref`: bitwise (tol 0) or within tol; prints
// and returns the largest gap.
inline double expect_next_losses(const TrainRun& r, const TrainRun& ref, double tol, const std::string& what) {
  double worst = 0;
  for (int s = kInterval + 1; s <= kSteps; ++s) {
    if (!r.loss.count(s) || !ref.loss.count(s)) {
      ADD_FAILURE() << what << ": no loss at step " << s << "\n" << r.out;
      continue;
    }
    const double a = r.loss.at(s), b = ref.loss.at(s);
    worst = std::max(worst, std::abs(a - b));
    if (tol == 0)
      EXPECT_TRUE(same_bits(a, b)) << what << " step " << s << ": " << a << " vs " << b;
    else
      EXPECT_LE(std::abs(a - b), tol) << what << " step " << s << ": " << a << " vs " << b;
  }
  std::printf("%s: steps %d..%d, max |loss - reference| = %.3g\n", what.c_str(), kInterval + 1, kSteps, worst);
  return worst;
}

// Resumed on its own layout from its step-kInterval checkpoint, a run must continue
// bit for bit (losses and final weights).
inline void expect_same_layout_resume(int np, const std::string& name, const std::vector<std::string>& base) {
  const TrainRun& full = straight(np, name, base);
  const TrainRun r = resume(full, kInterval, np, name + "_resumed", base, kSteps);
  expect_next_losses(r, full, 0, name + " -> " + name);
  ASSERT_FALSE(full.weights.empty()) << full.out;
  EXPECT_TRUE(r.weights == full.weights) << name << ": final weights differ from the uninterrupted run";
}

}  // namespace titan::test::ckpt
