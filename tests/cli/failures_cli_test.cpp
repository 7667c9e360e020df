// Silent failures and exit codes of the `titan` program, run as a child process
// (popen): a user error is one "error: ..." line naming the path, field or value,
// exit code 2; nothing that went wrong ends with exit code 0.
//
// Covered: a directory where a file is expected (--config DIR, generate --input DIR),
// an empty JSONL input, JSONL integer coercions (1e20, 1.5, -1), a dump folder that
// cannot be created or written, --threads out of range, non-finite config floats,
// a diverging run (the non-finite loss guard, stop or skip), metrics.jsonl on a full
// disk (/dev/full and a small tmpfs), and metrics.jsonl=false.
#include <gtest/gtest.h>

#include "titan/config/resolve.h"
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/util/test_files.h"
#include "tests/util/titan_exe.h"
#include "titan/checkpoint/train_checkpoint.h"

namespace titan {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::titan_exe;

// `titan ARGS` (after environment assignments `env`, e.g. "A=1 ") with 2>&1.
using Result = test::ShellResult;

Result run(const std::string& args, const std::string& env = "") {
  return test::run_shell(env + "'" + titan_exe() + "' " + args + " 2>&1");
}

fs::path fresh_dir(const std::string& name) { return test::fresh_dir("failures_" + name); }

// The data sets: the repository's data/ ($TITAN_DATA / $TITAN_SHARED override it).
std::string shared_data() { return titan::config::shared_data_dir(); }

// The last line of the output that begins with "error: " (stderr is unbuffered, so
// it can come before stdout's last lines in the combined output); empty if none.
std::string error_line(const std::string& out) {
  std::string found;
  size_t b = 0;
  while (b < out.size()) {
    size_t e = out.find('\n', b);
    if (e == std::string::npos) e = out.size();
    if (out.compare(b, 7, "error: ") == 0) found = out.substr(b, e - b);
    b = e + 1;
  }
  return found;
}

// A user error: exit code 2 and a last line "error: ..." that contains every `needle`.
void expect_user_error(const Result& r, const std::vector<std::string>& needles) {
  EXPECT_EQ(r.code, 2) << r.out;
  const std::string line = error_line(r.out);
  EXPECT_FALSE(line.empty()) << r.out;
  for (const auto& n : needles) EXPECT_NE(line.find(n), std::string::npos) << "'" << n << "' not in: " << line;
}

// A seconds-long train run: 2-layer debug model on Tiny Shakespeare.
std::string tiny_train(const fs::path& dump) {
  return "train --recipe debugmodel --job.dump_folder='" + dump.string() +
         "' --training.steps=4 --training.seq_len=32 --training.local_batch_size=2 --model.dim=32 "
         "--model.n_layers=1 --model.n_heads=2 --model.ffn_hidden_dim=64 --validation.enabled=false "
         "--lr_scheduler.warmup_steps=0 --metrics.log_freq=1";
}

std::string generate_args() {
  const std::string d = shared_data() + "/stories260k";
  return "generate --llama2c '" + d + "/stories260K.bin' --tokenizer '" + d + "/tok512.model' --quiet";
}

TEST(FailuresCli, DirectoryWhereAFileIsExpected) {
  const fs::path dir = fresh_dir("dir_as_file");
  expect_user_error(run("train --config '" + dir.string() + "' --print-config"),
                    {dir.string(), "is a directory"});
  expect_user_error(run(generate_args() + " --input '" + dir.string() + "' --output '" + (dir / "o.jsonl").string() +
                        "' --max-tokens 4"),
                    {"--input", dir.string(), "is a directory"});
}

TEST(FailuresCli, EmptyJsonlInputIsAnError) {
  const fs::path dir = fresh_dir("empty_jsonl");
  std::ofstream(dir / "in.jsonl") << "\n  \n";
  expect_user_error(run(generate_args() + " --input '" + (dir / "in.jsonl").string() + "' --output '" +
                        (dir / "o.jsonl").string() + "' --max-tokens 4"),
                    {(dir / "in.jsonl").string(), "no requests"});
  EXPECT_FALSE(fs::exists(dir / "o.jsonl"));
}

TEST(FailuresCli, JsonlIntegerCoercionsNameTheLineAndField) {
  const fs::path dir = fresh_dir("coerce");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"prompt_token_ids": [1, 1e20]})", "prompt_token_ids"},  // a float beyond int32: UB when cast
      {R"({"prompt_token_ids": [1.5]})", "prompt_token_ids"},      // would silently become 1
      {R"({"prompt": "a", "seed": -1})", "seed"},                  // would wrap to 2^64 - 1
      {R"({"prompt": "a", "max_tokens": 2.5})", "max_tokens"},
      {R"({"prompt": "a", "stop_token_ids": [3000000000]})", "stop_token_ids"},
      {R"({"prompt": "a", "temprature": 0})", "temprature"},  // misspelled: would sample at the default
      {R"({"prompt": "a", "dtype": "f32"})", "dtype"},        // not a request field
  };
  for (const auto& [text, field] : cases) {
    const fs::path in = dir / "in.jsonl";
    std::ofstream(in) << R"({"prompt": "ok"})" << "\n" << text << "\n";
    expect_user_error(run(generate_args() + " --input '" + in.string() + "' --output '" + (dir / "o.jsonl").string() +
                          "' --max-tokens 4"),
                      {in.string() + ":2", "\"" + field});
  }
  // The same fields with valid values run.
  std::ofstream(dir / "in.jsonl") << R"({"prompt_token_ids": [1, 400], "seed": 3, "max_tokens": 3})" << "\n";
  const Result ok = run(generate_args() + " --input '" + (dir / "in.jsonl").string() + "' --output '" +
                        (dir / "o.jsonl").string() + "'");
  EXPECT_EQ(ok.code, 0) << ok.out;
}

// Arguments the command line parser refuses are user errors too: one line, exit code 2.
TEST(FailuresCli, BadCommandLineArgumentsExitTwo) {
  expect_user_error(run(generate_args() + " --prompt a --max-tokens abc"), {"--max-tokens", "abc"});
  expect_user_error(run(generate_args() + " --prompt a --dtype ''"), {"--dtype", "must be f32 or bf16"});
  expect_user_error(run(generate_args() + " --prompt a --no-such-flag"), {"--no-such-flag"});
  EXPECT_EQ(run("generate --help").code, 0);
}

TEST(FailuresCli, DumpFolderThatCannotBeUsedIsAUserError) {
  const fs::path dir = fresh_dir("dump");
  std::ofstream(dir / "a_file") << "x";
  const std::string under_file = (dir / "a_file" / "run").string();
  expect_user_error(run(tiny_train(under_file)), {"job.dump_folder", under_file, "Not a directory"});
  // /proc refuses new directories even for root (a mode-0555 folder does not stop root).
  expect_user_error(run(tiny_train("/proc/titan_no_such_dir/run")), {"job.dump_folder", "/proc/titan_no_such_dir"});
}

TEST(FailuresCli, ThreadsOutOfRangeIsAUserError) {
  expect_user_error(run(generate_args() + " --threads 100000 --prompt a --max-tokens 2"), {"100000"});
  expect_user_error(run(generate_args() + " --threads -3 --prompt a --max-tokens 2"), {"--threads", "-3"});
  expect_user_error(run(generate_args() + " --prompt a --max-tokens 2", "TITAN_NUM_THREADS=100000 "),
                    {"TITAN_NUM_THREADS", "100000"});
}

TEST(FailuresCli, NonFiniteConfigFloatsAreRefused) {
  for (const std::string& kv : {"optimizer.lr=inf", "optimizer.lr=nan", "lr_scheduler.min_lr=-inf",
                                "training.max_norm=inf", "generator.temperature=inf", "model.rope_theta=inf",
                                "optimizer.weight_decay=nan"}) {
    const std::string field = kv.substr(0, kv.find('='));
    expect_user_error(run("train --recipe debugmodel --print-config --" + kv), {field, "finite"});
  }
}

TEST(FailuresCli, DivergingRunStopsWithTheStepOrSkipsIt) {
  // A finite but absurd learning rate: the first update blows the weights up, the
  // second step's loss is not finite.
  const fs::path dump = fresh_dir("diverge");
  const std::string args = tiny_train(dump) + " --optimizer.lr=1e30 --training.max_norm=0 --checkpoint.enable=true "
                                              "--checkpoint.interval=1";
  const Result r = run(args);
  expect_user_error(r, {"step ", "not finite", "training.skip_nonfinite_steps"});
  // The last checkpoint is the one before the bad step, and it loads.
  const auto latest = CheckpointManager::latest((dump / "checkpoint").string());
  ASSERT_TRUE(latest.has_value()) << r.out;
  const LoadedCheckpoint c = CheckpointManager::load(*latest);
  const std::string line = error_line(r.out);
  EXPECT_NE(line.find("step " + std::to_string(c.state.step + 1) + ":"), std::string::npos) << line;

  const fs::path dump2 = fresh_dir("diverge_skip");
  const Result s = run(tiny_train(dump2) + " --optimizer.lr=1e30 --training.max_norm=0 --training.skip_nonfinite_steps=true");
  EXPECT_EQ(s.code, 0) << s.out;
  EXPECT_NE(s.out.find("step skipped"), std::string::npos) << s.out;
  int skipped = 0;
  std::ifstream f(dump2 / "metrics.jsonl");
  for (std::string l; std::getline(f, l);) skipped += json::parse(l).value("skipped_nonfinite", false);
  EXPECT_GE(skipped, 1);
}

TEST(FailuresCli, MetricsOnAFullDeviceIsAnError) {
  // metrics.jsonl linked to /dev/full: every write fails with ENOSPC.
  const fs::path dump = fresh_dir("devfull");
  fs::create_symlink("/dev/full", dump / "metrics.jsonl");
  expect_user_error(run(tiny_train(dump)), {"metrics", "metrics.jsonl", "No space left on device"});
}

TEST(FailuresCli, MetricsOnAFullTmpfsIsAnErrorAndTheCheckpointLoads) {
  const fs::path mnt = fresh_dir("tmpfs");
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=1m") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root / CAP_SYS_ADMIN)";
  struct Unmount {
    std::string p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount{mnt.string()};
  // A small text dataset (its token cache fits), then checkpoints of ~0.3 MB each and
  // metrics rows until the 1 MiB disk is full; whichever write fails, the run must
  // fail and say why.
  const fs::path data = fresh_dir("tmpfs_data") / "text.txt";
  {
    std::ofstream t(data);
    for (int i = 0; i < 400; ++i) t << "First Citizen: Before we proceed any further, hear me speak.\n";
  }
  const Result r = run(tiny_train(mnt / "run") + " --training.dataset_path='" + data.string() +
                       "' --training.steps=40 --checkpoint.enable=true --checkpoint.interval=1 "
                       "--checkpoint.keep_latest_k=0");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(error_line(r.out).find("No space left on device"), std::string::npos) << r.out;
  // metrics.jsonl ends in a complete line, and the newest complete checkpoint loads.
  std::ifstream f(mnt / "run" / "metrics.jsonl");
  std::string text((std::istreambuf_iterator<char>(f)), {});
  if (!text.empty()) EXPECT_EQ(text.back(), '\n');
  for (size_t b = 0; b < text.size();) {
    const size_t e = text.find('\n', b);
    EXPECT_TRUE(json::parse(text.substr(b, e - b), nullptr, false).is_object()) << text.substr(b, e - b);
    b = e + 1;
  }
  const auto latest = CheckpointManager::latest((mnt / "run" / "checkpoint").string());
  ASSERT_TRUE(latest.has_value()) << r.out;
  EXPECT_NO_THROW(CheckpointManager::load(*latest));
}

// generate --checkpoint on a damaged checkpoint names the file and what is wrong; the
// job's dump folder finds the newest checkpoint under its checkpoint/.
TEST(FailuresCli, DamagedCheckpointNamesTheFile) {
  const fs::path dump = fresh_dir("damaged_ckpt");
  ASSERT_EQ(run(tiny_train(dump) + " --checkpoint.enable=true --checkpoint.interval=4").code, 0);
  const fs::path step = dump / "checkpoint" / "step-4";
  const std::string gen = "generate --prompt a --max-tokens 2 --quiet --checkpoint '";
  EXPECT_EQ(run(gen + dump.string() + "'").code, 0);
  const auto size = fs::file_size(step / "model.safetensors");
  fs::resize_file(step / "model.safetensors", 1000);
  expect_user_error(run(gen + step.string() + "'"),
                    {"incomplete or damaged", "model.safetensors has 1000 bytes, MANIFEST.json says " +
                                                  std::to_string(size)});
  fs::remove(step / "MANIFEST.json");
  expect_user_error(run(gen + step.string() + "'"), {"incomplete or damaged", "MANIFEST.json is missing"});
}

// Limits that would otherwise fail inside a component name the config fields.
TEST(FailuresCli, ScheduleAndPenaltyLimitsNameTheirFields) {
  expect_user_error(run(tiny_train(fresh_dir("warmup")) + " --lr_scheduler.warmup_steps=4"),
                    {"lr_scheduler.warmup_steps=4 must be < training.steps=4"});
  expect_user_error(run("rl --recipe alphabet_sort_grpo --rl.init_from= --job.dump_folder='" +
                        fresh_dir("overlong").string() + "' --generator.max_tokens=8 --rl.overlong_buffer_len=9"),
                    {"rl.overlong_buffer_len=9 must be <= generator.max_tokens=8"});
}

TEST(FailuresCli, MetricsJsonlFalseWritesNoMetrics) {
  const fs::path dump = fresh_dir("nometrics");
  const Result r = run(tiny_train(dump) + " --metrics.jsonl=false");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(fs::exists(dump / "metrics.jsonl"));
  const fs::path dump2 = fresh_dir("metrics");
  EXPECT_EQ(run(tiny_train(dump2)).code, 0);
  EXPECT_TRUE(fs::exists(dump2 / "metrics.jsonl"));
}

TEST(FailuresCli, RLRunWhoseRolloutsAllFailExitsWithTheReason) {
  // A random-init policy whose context (64 positions) is shorter than every prompt.
  const fs::path dump = fresh_dir("rl_all_fail");
  const Result r = run("rl --recipe alphabet_sort_grpo --rl.init_from= --job.dump_folder='" + dump.string() +
                       "' --training.seq_len=16 --training.steps=2 --rl.val_freq=0 --rl.rollouts_per_step=8 "
                       "--rl.group_size=4 --checkpoint.enable=false --model.dim=32 --model.n_layers=1");
  expect_user_error(r, {"step 1: 8 of 8 rollouts failed", "rl.max_error_fraction", "rollouts.jsonl"});
  EXPECT_NE(r.out.find("8 of 8 rollouts failed: 8 x "), std::string::npos) << r.out;  // the per-step count line
}

TEST(FailuresCli, FieldsACommandDoesNotReadAreRefused) {
  expect_user_error(run("train --recipe debugmodel --print-config --generator.temperature=0.5"),
                    {"generator.temperature=0.5", "titan train"});
  expect_user_error(run("train --recipe debugmodel --print-config --rl.group_size=4"), {"rl.group_size=4", "titan train"});
  for (const std::string& kv : {"training.local_batch_size=3", "training.global_batch_size=16",
                                "training.activation_checkpoint=full", "validation.steps=3",
                                "checkpoint.export_hf=true", "training.seq_len=128", "model.dim=64",
                                "metrics.peak_flops=1e12", "rl.max_sampling_rounds=2"}) {
    const std::string field = kv.substr(0, kv.find('='));
    expect_user_error(run("rl --recipe alphabet_sort_grpo --print-config --" + kv), {field, "titan rl"});
  }
  // Conditional fields: the Muon settings need optimizer.name=muon.
  expect_user_error(run("train --recipe debugmodel --print-config --optimizer.muon_ns_steps=3"),
                    {"optimizer.muon_ns_steps=3", "optimizer.name=muon"});
  EXPECT_EQ(run("train --recipe debugmodel --print-config --optimizer.name=muon --optimizer.muon_ns_steps=3").code, 0);
  // The recipe's own values (a --print-config dump read back) are not refused.
  const fs::path dir = fresh_dir("roundtrip");
  const Result dump = run("rl --recipe alphabet_sort_grpo --print-config");
  ASSERT_EQ(dump.code, 0) << dump.out;
  std::ofstream(dir / "rl.toml") << dump.out;
  EXPECT_EQ(run("rl --recipe alphabet_sort_grpo --print-config --config '" + (dir / "rl.toml").string() + "'").code, 0);
}

}  // namespace
}  // namespace titan
