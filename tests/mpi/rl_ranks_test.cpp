// `titan rl` across ranks (ctest label mpi): the demo recipe alphabet_sort_grpo,
// shortened (3 steps of 8 rollouts in groups of 4, validation on 4 samples at steps
// 0, 2 and 3), from a small SFT export that the suite trains first (`titan train
// --recipe alphabet_sort_sft`, 120 steps: rewards that vary within groups, so the
// updates are real). mpirun -np 3 runs the trainer with FSDP over ranks 0-1 and the
// generator on rank 2 (titan/rl/distributed_controller.h).
//
//  - logprob_diff_max == 0.0 at every step of the 3-rank run;
//  - the 3-rank run equals the 1-rank run bitwise: every metrics.jsonl value except
//    timings and memory (loss, grad_norm, rewards, entropy, ...; compared as the
//    row's text, which round-trips doubles), rollouts.jsonl byte for byte, and the
//    final checkpoint's model.safetensors and optimizer.safetensors byte for byte.
//    Where it comes from: the generator draws the same rollouts from the same weights,
//    samples and seeds (step_rollouts.h); the trainer cuts the same microbatches and
//    dp rank j mod 2 runs microbatch j on the gathered full weights with the same
//    kernels, every microbatch's loss normalised by the whole step's tokens, and
//    FullyShard adds the microbatch gradients in the 1-rank accumulation order (a rank
//    without a microbatch in the last round adds -0.0, the identity: one step here has
//    an odd count of 7); the grad norm is formed from the 1-rank blocks and AdamW is
//    elementwise (fsdp.h); the weights reach the generator by copies only;
//  - a checkpoint written on 3 ranks resumes on 1 rank, and one written on 1 rank
//    resumes on 3, to the same final checkpoint bytes as the uninterrupted run;
//  - a tensor-parallel trainer (mpirun -np 3, tensor_parallel_degree=2: the TP pair on
//    ranks 0-1, the generator at tp = 1 on rank 2), from an SFT export with its
//    vocabulary padded to 264 (tp must divide it): logprob_diff_max is its true gap,
//    > 0 and < 1e-3 at every step (the rowwise layers sum the two ranks' partial
//    products, which adds them in another order than the generator's one GEMM);
//    its first step (the same rollouts as the 1-rank run from the same export) has
//    the 1-rank run's loss and grad norm within 1e-4 relative; losses finite; two
//    runs equal bitwise (every metrics value, rollouts.jsonl, final checkpoint), and
//    TP 2 × FSDP 2 on -np 5 equals TP 2 bitwise; a TP run saved at step 2 and
//    resumed on the same layout ends with the uninterrupted run's checkpoint bytes;
//  - unsupported layouts are a one-line error (exit 2) on every rank before any work;
//  - a step whose rollouts all fail on the generator stops every rank with the same
//    error (no rank waits for the others);
//  - the generator rank killed with SIGKILL mid-run (the trainers wait for its next
//    step's work) stops the job within a bounded time, naming the signal; SIGTERM to
//    every rank ends all of them after the same step, with its checkpoint (exit 130).
#include <gtest/gtest.h>

#include <fmt/core.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/mpi/mpi_run.h"
#include "titan/rl/controller.h"

using namespace titan::test;
using nlohmann::json;

namespace {

constexpr int kSteps = 3;

// The SFT export the RL runs start from, trained once per process.
const std::string& sft_export() {
  static const std::string hf = [] {
    const std::string dump = fresh_dir("rl_ranks_sft");
    const int rc = run(titan_argv(0, {"train", "--recipe", "alphabet_sort_sft", "--training.steps=120",
                                      "--validation.enabled=false", "--lr_scheduler.warmup_steps=10",
                                      "--job.dump_folder=" + dump}),
                       dump + "/log.txt");
    EXPECT_EQ(rc, 0) << file_bytes(dump + "/log.txt");
    return dump + "/hf";
  }();
  return hf;
}

// The same SFT run with the vocabulary padded from the tokenizer's 263 to 264 rows
// (model.vocab_size), so that tensor_parallel_degree=2 divides it.
const std::string& sft_export_264() {
  static const std::string hf = [] {
    const std::string dump = fresh_dir("rl_ranks_sft_264");
    const int rc = run(titan_argv(0, {"train", "--recipe", "alphabet_sort_sft", "--training.steps=120",
                                      "--validation.enabled=false", "--lr_scheduler.warmup_steps=10",
                                      "--model.vocab_size=264", "--job.dump_folder=" + dump}),
                       dump + "/log.txt");
    EXPECT_EQ(rc, 0) << file_bytes(dump + "/log.txt");
    return dump + "/hf";
  }();
  return hf;
}

// init: the SFT export, or "" for a random init (tests that stop before training).
std::vector<std::string> rl_args(int steps, const std::string& dump, const std::string& init) {
  return {"rl",
          "--recipe",
          "alphabet_sort_grpo",
          "--rl.init_from=" + init,
          "--training.steps=" + std::to_string(steps),
          "--rl.rollouts_per_step=8",
          "--rl.group_size=4",
          "--rl.val_freq=2",
          "--rl.val_samples=4",
          "--rl.microbatch_tokens=600",  // 6 to 8 microbatches per step, one with 7
          "--checkpoint.interval=100",   // a checkpoint at the last step only
          "--job.dump_folder=" + dump};
}

struct RLRun {
  int rc = -1;
  std::string dump, log;
  std::vector<json> rows;
};

RLRun run_rl(int np, const std::string& name, int steps, const std::string& dump_in = "",
             const std::vector<std::string>& extra = {}, const std::string& init = "") {
  RLRun r;
  r.dump = dump_in.empty() ? fresh_dir(name) : dump_in;
  const std::string log = r.dump + "/log-" + std::to_string(np) + "-" + std::to_string(steps) + ".txt";
  std::vector<std::string> args = rl_args(steps, r.dump, init.empty() ? sft_export() : init);
  args.insert(args.end(), extra.begin(), extra.end());
  r.rc = run(titan_argv(np, args), log);
  r.log = file_bytes(log);
  if (r.rc == 0) r.rows = read_metrics(r.dump);
  return r;
}

// The row without its timing and memory values, as text.
std::string value_text(json row) {
  for (auto it = row.begin(); it != row.end();)
    it = titan::rl::is_timing_metric(it.key()) ? row.erase(it) : std::next(it);
  return row.dump();
}

std::string final_file(const RLRun& r, const std::string& file) {
  return file_bytes(r.dump + "/checkpoint/step-" + std::to_string(kSteps) + "/" + file);
}

// The uninterrupted 1-rank run, once per process.
const RLRun& one_rank() {
  static const RLRun r = run_rl(0, "rl_ranks_one", kSteps);
  return r;
}

void expect_same_run(const RLRun& one, const RLRun& many, const std::string& what) {
  ASSERT_EQ(one.rc, 0) << one.log;
  ASSERT_EQ(many.rc, 0) << what << ":\n" << many.log;
  ASSERT_EQ(one.rows.size(), static_cast<size_t>(kSteps + 1)) << one.log;  // step 0 (validation) + 3 steps
  ASSERT_EQ(many.rows.size(), one.rows.size()) << what << ": metrics.jsonl rows";
  for (size_t i = 0; i < one.rows.size(); ++i)
    EXPECT_EQ(value_text(many.rows[i]), value_text(one.rows[i])) << what << ", row " << i;
  const std::string model = final_file(one, "model.safetensors");
  ASSERT_GT(model.size(), 1000000u);  // 427,648 f32 parameters
  EXPECT_TRUE(final_file(many, "model.safetensors") == model) << what << ": final weights differ";
  EXPECT_TRUE(final_file(many, "optimizer.safetensors") == final_file(one, "optimizer.safetensors"))
      << what << ": final optimizer state differs";
}

}  // namespace

TEST(RLRanks, FsdpTrainerAndGeneratorRankEqualOneRankBitwise) {
  const RLRun& one = one_rank();
  const RLRun three = run_rl(3, "rl_ranks_three", kSteps);
  expect_same_run(one, three, "-np 3");
  if (HasFatalFailure()) return;
  EXPECT_NE(three.log.find("3 ranks: trainer FSDP dp_shard 2 on ranks 0-1, generator on rank 2"), std::string::npos)
      << three.log;
  int steps = 0, odd = 0;
  double grad = 0, reward_std = 0;
  for (const json& row : three.rows) {
    if (!row.contains("loss")) continue;
    ++steps;
    EXPECT_EQ(row["logprob_diff_max"].get<double>(), 0.0) << row.dump();
    EXPECT_EQ(row["logprob_diff_mean"].get<double>(), 0.0) << row.dump();
    EXPECT_GT(row["trained_tokens"].get<int64_t>(), 0);
    odd += row["microbatches"].get<int64_t>() % 2;
    grad += row["grad_norm"].get<double>();
    reward_std += row["reward_std"].get<double>();
  }
  EXPECT_EQ(steps, kSteps);
  EXPECT_GE(odd, 1) << "no step with an odd microbatch count: FullyShard::skip_microbatch untested";
  EXPECT_GT(grad, 0.0);
  EXPECT_GT(reward_std, 0.0);
  EXPECT_EQ(file_bytes(three.dump + "/rollouts.jsonl"), file_bytes(one.dump + "/rollouts.jsonl"));
  size_t lines = 0;  // only rank 0 prints the step lines
  for (size_t at = three.log.find("step    1 |"); at != std::string::npos; at = three.log.find("step    1 |", at + 1))
    ++lines;
  EXPECT_EQ(lines, 1u) << three.log;
}

TEST(RLRanks, FsdpReshardNeverEqualOneRankBitwise) {
  // fsdp_reshard_after_forward=never keeps each block gathered from the training
  // forward to its backward (skip_microbatch takes part in the same all-gathers); the
  // gathered values are the shards' bits, so the run is the 1-rank run's, bit for bit.
  const RLRun never = run_rl(3, "rl_ranks_never", kSteps, "", {"--parallelism.fsdp_reshard_after_forward=never"});
  expect_same_run(one_rank(), never, "-np 3, fsdp_reshard_after_forward=never");
  for (const json& row : never.rows) {
    if (row.contains("loss")) {
      EXPECT_EQ(row["logprob_diff_max"].get<double>(), 0.0) << row.dump();
    }
  }
  // One process shards nothing: the key would be ignored.
  const std::string dump = fresh_dir("rl_ranks_never_one");
  std::vector<std::string> args = rl_args(kSteps, dump, "");
  args.push_back("--parallelism.fsdp_reshard_after_forward=never");
  EXPECT_EQ(run(titan_argv(0, args), dump + "/log.txt"), 2);
  EXPECT_NE(file_bytes(dump + "/log.txt").find("parallelism.fsdp_reshard_after_forward=never needs FSDP"),
            std::string::npos)
      << file_bytes(dump + "/log.txt");
}

TEST(RLRanks, CheckpointsResumeAcrossLayouts) {
  const RLRun& one = one_rank();
  for (auto [first, second] : {std::pair{3, 0}, std::pair{0, 3}}) {
    const std::string what = fmt::format("saved at step 2 on {} ranks, resumed on {}", std::max(first, 1),
                                         std::max(second, 1));
    const RLRun a = run_rl(first, "rl_ranks_resume_" + std::to_string(first), 2);
    ASSERT_EQ(a.rc, 0) << what << ":\n" << a.log;
    const RLRun b = run_rl(second, "", kSteps, a.dump);
    EXPECT_NE(b.log.find("resumed from " + a.dump + "/checkpoint/step-2"), std::string::npos) << what << b.log;
    expect_same_run(one, b, what);
  }
}

// Every training row of a tensor-parallel run: the gap is reported, > 0 and small.
void expect_tp_gap(const RLRun& r, const std::string& what) {
  int steps = 0, trained = 0;
  for (const json& row : r.rows) {
    if (!row.contains("loss")) continue;
    ++steps;
    const double gap = row["logprob_diff_max"].get<double>();
    EXPECT_GT(gap, 0.0) << what << ": " << row.dump();
    EXPECT_LT(gap, 1e-3) << what << ": " << row.dump();
    EXPECT_GT(row["logprob_diff_mean"].get<double>(), 0.0) << what << ": " << row.dump();
    EXPECT_TRUE(std::isfinite(row["loss"].get<double>())) << what << ": " << row.dump();
    // A step whose every group has one reward (zero_std_group_frac 1: which depends on
    // what this CPU's kernels sampled) has no advantage, hence grad norm 0.
    const double gn = row["grad_norm"].get<double>();
    EXPECT_TRUE(std::isfinite(gn) && (row["zero_std_group_frac"].get<double>() < 1.0 ? gn > 0 : gn == 0.0))
        << what << ": " << row.dump();
    if (gn > 0) ++trained;
    EXPECT_GT(row["trained_tokens"].get<int64_t>(), 0);
    std::cout << what << " step " << row["step"] << ": logprob_diff_max " << gap << ", logprob_diff_mean "
              << row["logprob_diff_mean"] << ", loss " << row["loss"] << "\n";
  }
  EXPECT_EQ(steps, kSteps) << what;
  EXPECT_GT(trained, 0) << what << ": no step had a gradient";
}

const std::vector<std::string> kTp2 = {"--parallelism.tensor_parallel_degree=2"};

TEST(RLRanks, TensorParallelTrainerReportsItsTrueGap) {
  const std::string& init = sft_export_264();
  const RLRun tp = run_rl(3, "rl_ranks_tp", kSteps, "", kTp2, init);
  ASSERT_EQ(tp.rc, 0) << tp.log;
  ASSERT_EQ(tp.rows.size(), static_cast<size_t>(kSteps + 1)) << tp.log;
  EXPECT_NE(tp.log.find("3 ranks: trainer FSDP dp_shard 1 × TP 2 on ranks 0-1, generator on rank 2"),
            std::string::npos)
      << tp.log;
  expect_tp_gap(tp, "TP 2");
  // Step 1 trains on the 1-rank run's rollouts (the generator draws them from the
  // export's weights at tp = 1): loss and grad norm of the TP trainer within 1e-4 of
  // the 1-rank trainer's (whose gap is 0.0: the generator's own logprobs).
  const RLRun one = run_rl(0, "rl_ranks_tp_one", 1, "", {}, init);
  ASSERT_EQ(one.rc, 0) << one.log;
  ASSERT_EQ(one.rows.size(), 2u) << one.log;
  const json& a = one.rows[1];
  const json& b = tp.rows[1];
  EXPECT_EQ(a["logprob_diff_max"].get<double>(), 0.0) << a.dump();
  EXPECT_EQ(a["reward_mean"], b["reward_mean"]) << "step 1 rollouts differ";
  EXPECT_EQ(a["trained_tokens"], b["trained_tokens"]);
  for (const char* k : {"loss", "grad_norm", "entropy"}) {
    // The loss -Σ A ratio is near 0 on-policy (advantages of a group sum to 0): its
    // scale is that of the advantages (~1).
    const double x = a[k].get<double>(), y = b[k].get<double>();
    EXPECT_LE(std::fabs(x - y), 1e-4 * std::max(std::fabs(x), 1e-2)) << k << ": 1 rank " << x << ", TP 2 " << y;
    std::cout << "step 1 " << k << ": 1 rank " << x << ", TP 2 " << y << "\n";
  }
  // Run to run: the same bits (the tp sums run in rank order).
  const RLRun again = run_rl(3, "rl_ranks_tp_again", kSteps, "", kTp2, init);
  ASSERT_EQ(again.rc, 0) << again.log;
  ASSERT_EQ(again.rows.size(), tp.rows.size());
  for (size_t i = 0; i < tp.rows.size(); ++i)
    EXPECT_EQ(value_text(again.rows[i]), value_text(tp.rows[i])) << "TP 2 run to run, row " << i;
  EXPECT_EQ(file_bytes(again.dump + "/rollouts.jsonl"), file_bytes(tp.dump + "/rollouts.jsonl"));
  EXPECT_TRUE(final_file(again, "model.safetensors") == final_file(tp, "model.safetensors"));
  EXPECT_TRUE(final_file(again, "optimizer.safetensors") == final_file(tp, "optimizer.safetensors"));
  // TP 2 × FSDP 2 (-np 5): the TP 2 run bit for bit (the tp pair of dp rank q runs
  // microbatches j ≡ q mod 2 and FullyShard adds their gradients in the 1-dp-rank
  // accumulation order, as for FSDP alone).
  const RLRun tp_fsdp = run_rl(5, "rl_ranks_tp_fsdp", kSteps, "", kTp2, init);
  ASSERT_EQ(tp_fsdp.rc, 0) << tp_fsdp.log;
  EXPECT_NE(tp_fsdp.log.find("5 ranks: trainer FSDP dp_shard 2 × TP 2 on ranks 0-3, generator on rank 4"),
            std::string::npos)
      << tp_fsdp.log;
  ASSERT_EQ(tp_fsdp.rows.size(), tp.rows.size());
  for (size_t i = 0; i < tp.rows.size(); ++i)
    EXPECT_EQ(value_text(tp_fsdp.rows[i]), value_text(tp.rows[i])) << "TP 2 × FSDP 2, row " << i;
  EXPECT_EQ(file_bytes(tp_fsdp.dump + "/rollouts.jsonl"), file_bytes(tp.dump + "/rollouts.jsonl"));
  EXPECT_TRUE(final_file(tp_fsdp, "model.safetensors") == final_file(tp, "model.safetensors"));
  EXPECT_TRUE(final_file(tp_fsdp, "optimizer.safetensors") == final_file(tp, "optimizer.safetensors"));
  // Saved at step 2 on the TP layout, resumed on it: the uninterrupted run's bytes.
  const RLRun first = run_rl(3, "rl_ranks_tp_resume", 2, "", kTp2, init);
  ASSERT_EQ(first.rc, 0) << first.log;
  const RLRun resumed = run_rl(3, "", kSteps, first.dump, kTp2, init);
  ASSERT_EQ(resumed.rc, 0) << resumed.log;
  EXPECT_NE(resumed.log.find("resumed from " + first.dump + "/checkpoint/step-2"), std::string::npos) << resumed.log;
  ASSERT_EQ(resumed.rows.size(), tp.rows.size());
  for (size_t i = 0; i < tp.rows.size(); ++i)
    EXPECT_EQ(value_text(resumed.rows[i]), value_text(tp.rows[i])) << "TP 2 resumed, row " << i;
  EXPECT_EQ(file_bytes(resumed.dump + "/rollouts.jsonl"), file_bytes(tp.dump + "/rollouts.jsonl"));
  EXPECT_TRUE(final_file(resumed, "model.safetensors") == final_file(tp, "model.safetensors"));
  EXPECT_TRUE(final_file(resumed, "optimizer.safetensors") == final_file(tp, "optimizer.safetensors"));
}

TEST(RLRanks, UnsupportedLayoutsAreRefusedOnEveryRank) {
  const std::string dump = fresh_dir("rl_ranks_refused");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--parallelism.tensor_parallel_degree=3",
       "titan rl on 3 ranks: parallelism.tensor_parallel_degree=3 does not divide the trainer's 2 ranks (the world "
       "minus rl.num_generators=1)"},
      {"--parallelism.tensor_parallel_degree=2",  // the random init's vocabulary is the tokenizer's 263
       "parallelism.tensor_parallel_degree=2 does not divide the model's vocabulary size (263)"},
      {"--parallelism.enable_sequence_parallel=true",
       "parallelism.enable_sequence_parallel=true is not used by titan rl (the RL trainer's tensor parallelism runs "
       "without sequence parallelism); remove it"},
      {"--parallelism.pipeline_parallel_degree=2",
       "titan rl: parallelism.pipeline_parallel_degree=2 is not supported (the RL trainer runs FSDP over "
       "parallelism.data_parallel_shard_degree and tensor parallelism only)"},
      {"--parallelism.context_parallel_degree=2",
       "titan rl: parallelism.context_parallel_degree=2 is not supported (the RL trainer runs FSDP over "
       "parallelism.data_parallel_shard_degree and tensor parallelism only)"},
      {"--parallelism.expert_parallel_degree=2",
       "titan rl: parallelism.expert_parallel_degree=2 is not supported (the RL trainer runs FSDP over "
       "parallelism.data_parallel_shard_degree and tensor parallelism only)"},
      {"--parallelism.data_parallel_replicate_degree=2",
       "titan rl: parallelism.data_parallel_replicate_degree=2 is not supported (the RL trainer runs FSDP over "
       "parallelism.data_parallel_shard_degree and tensor parallelism only)"},
      {"--parallelism.data_parallel_shard_degree=3",
       "titan rl on 3 ranks: parallelism.data_parallel_shard_degree=3 must be -1 or the trainer's 2 ranks (the "
       "world minus rl.num_generators=1)"},
      {"--rl.num_generators=2",
       "rl.num_generators=2 is not supported: titan rl runs one generator (its own rank under mpirun)"},
      {"--rl.max_offpolicy_steps=1",
       "titan rl on 3 ranks: rl.max_offpolicy_steps=1 is not supported (the generator rank runs synchronous "
       "on-policy steps; set it to 0)"},
  };
  {
    // One process: the trainer and the generator share it, so there is no TP group.
    std::vector<std::string> args = rl_args(kSteps, dump + "/one", "");
    args.push_back("--parallelism.tensor_parallel_degree=2");
    EXPECT_EQ(run(titan_argv(0, args), dump + "/log-one.txt"), 2);
    EXPECT_NE(file_bytes(dump + "/log-one.txt")
                  .find("titan rl: parallelism.tensor_parallel_degree=2 on 1 rank (the trainer and the generator "
                        "share it); launch with mpirun -np 3 for 2 tensor-parallel trainer ranks and a generator "
                        "rank\n"),
              std::string::npos)
        << file_bytes(dump + "/log-one.txt");
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<std::string> args = rl_args(kSteps, dump + "/" + std::to_string(i), "");
    args.push_back(cases[i].first);
    EXPECT_EQ(expect_refused_on_every_rank(3, args, cases[i].second, dump + "/log" + std::to_string(i) + ".txt",
                                           cases[i].first),
              2)
        << cases[i].first;
  }
}

TEST(RLRanks, FailedRolloutsStopEveryRank) {
  // A KV cache too small for any prompt: every rollout of step 1 fails on the
  // generator; the trainers see the same failures in the step's message.
  const std::string dump = fresh_dir("rl_ranks_failed");
  std::vector<std::string> args = rl_args(kSteps, dump, "");
  args.push_back("--generator.kv_cache_bytes=20000");
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = run(titan_argv(3, args), dump + "/log.txt");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string out = file_bytes(dump + "/log.txt");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_LT(secs, 120.0) << out;
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(out.find("error: rank " + std::to_string(r) +
                       ": step 1: 8 of 8 rollouts failed, more than rl.max_error_fraction=0.5"),
              std::string::npos)
        << "rank " << r << ":\n"
        << out;
  EXPECT_EQ(read_metrics(dump).size(), 1u);  // the step-0 validation row only
}

// A long random-init run under mpirun -np 3 (output in LOG), once its step-2 line is out.
using Clock = std::chrono::steady_clock;
std::unique_ptr<Proc> start_long_run(const std::string& dump, const std::string& log) {
  setenv("TITAN_COLLECTIVE_TIMEOUT_S", "60", 1);
  std::vector<std::string> args = rl_args(100000, dump, "");
  args.push_back("--generator.max_tokens=48");
  auto job = std::make_unique<Proc>(titan_argv(3, args), log);
  const auto t0 = Clock::now();
  while (file_bytes(log).find("step    2 |") == std::string::npos) {
    EXPECT_FALSE(job->exited()) << file_bytes(log);
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(120)) << file_bytes(log);
    if (job->exited() || Clock::now() - t0 > std::chrono::seconds(120)) return nullptr;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return job;
}

// Waits for the job's end; false after 90 s.
bool wait_for_exit(Proc& job) {
  const auto t0 = Clock::now();
  while (!job.exited()) {
    if (Clock::now() - t0 > std::chrono::seconds(90)) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::cout << "job stopped " << std::chrono::duration<double>(Clock::now() - t0).count() << " s after the signal\n";
  return true;
}

TEST(RLRanks, KilledGeneratorRankStopsTheJob) {
  const std::string dump = fresh_dir("rl_ranks_kill");
  const std::string log = dump + "/log.txt";
  std::unique_ptr<Proc> job = start_long_run(dump, log);
  ASSERT_TRUE(job);
  pid_t generator = -1;
  for (pid_t p : titan_children(job->pid))
    if (world_rank_of(p) == 2) generator = p;
  ASSERT_GT(generator, 0) << "no rank 2 among the children of mpirun " << job->pid;
  ::kill(generator, SIGKILL);
  ASSERT_TRUE(wait_for_exit(*job)) << "the job did not stop:\n" << file_bytes(log);
  const std::string out = file_bytes(log);
  EXPECT_NE(job->exit_code(), 0) << out;
  EXPECT_NE(out.find("exited on signal 9"), std::string::npos) << out;
  EXPECT_TRUE(titan_children(getpid()).empty());
}

TEST(RLRanks, SigtermOnEveryRankSavesACheckpointAndStops) {
  // A scheduler's stop (SIGTERM to every task): the generator's decision travels with
  // the next step's work, every rank ends after that step, rank 0 saves it.
  const std::string dump = fresh_dir("rl_ranks_sigterm");
  const std::string log = dump + "/log.txt";
  std::unique_ptr<Proc> job = start_long_run(dump, log);
  ASSERT_TRUE(job);
  const std::vector<pid_t> ranks = titan_children(job->pid);
  ASSERT_EQ(ranks.size(), 3u);
  for (pid_t p : ranks) ::kill(p, SIGTERM);
  ASSERT_TRUE(wait_for_exit(*job)) << "the job did not stop:\n" << file_bytes(log);
  const std::string out = file_bytes(log);
  EXPECT_EQ(job->exit_code(), 130) << out;
  const std::vector<json> rows = read_metrics(dump);
  ASSERT_GE(rows.size(), 3u) << out;  // step 0 (validation), 1, 2, ...
  const int64_t last = rows.back()["step"].get<int64_t>();
  EXPECT_TRUE(std::filesystem::exists(dump + "/checkpoint/step-" + std::to_string(last) + "/model.safetensors"))
      << "no checkpoint of the last step " << last << ":\n"
      << out;
}
