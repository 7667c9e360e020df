// The pretraining trainer end to end on the debugmodel recipe (2 layers, dim 64,
// byte tokens of tinyshakespeare, seq 32, batch 4):
//   - resume is bitwise: 20 steps straight vs 10 + a new Trainer resuming from the
//     step-10 checkpoint + 10 more give identical per-step losses (metrics.jsonl) and
//     memcmp-identical weights, with synchronous and asynchronous checkpoint writes;
//   - metrics.jsonl rows carry the documented keys;
//   - `titan train` killed with SIGKILL while an asynchronous checkpoint write is in
//     progress leaves the previous checkpoint loadable; the next start removes the
//     incomplete directory, resumes from that checkpoint and ends with the weights of
//     an uninterrupted run;
//   - SIGINT / SIGTERM: the program saves a checkpoint at the step it was on, exits
//     with 128 + signal, and a restart resumes from it to the same final weights;
//   - the Hugging Face export (config.json + model.safetensors) loads back into a
//     model whose logits equal the trainer's bit for bit;
//   - training.activation_checkpoint=full gives the same bits as none, in less memory;
//   - the step-0 validation loss of the shakespeare_char recipe's init is near ln V.
#include "titan/train/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "tests/train/train_test_util.h"
#include "titan/autograd/node.h"
#include "titan/checkpoint/hf_config.h"
#include "titan/core/error.h"
#include "titan/core/host_alloc.h"
#include "titan/core/thread_pool.h"
#include "titan/data/byte_tokenizer.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/models/family.h"
#include "titan/rl/sft_data.h"
#include "titan/ops/loss.h"
#include "titan/train/metrics.h"

using namespace titan;
using namespace titan::test;

namespace {

config::JobConfig debug_job(const std::string& dump, std::vector<std::string> overrides) {
  overrides.push_back("--job.dump_folder=" + dump);
  return config::resolve_config("debugmodel", std::nullopt, overrides);
}

class ResumeBitwise : public ::testing::TestWithParam<const char*> {};

TEST_P(ResumeBitwise, TwentyStepsEqualTenPlusTen) {
  const std::string mode = GetParam();
  const std::string dump = fresh_dir("resume_" + mode);
  const auto job = debug_job(dump, {"--training.steps=20", "--validation.freq=10", "--validation.steps=2",
                                    "--checkpoint.enable=true", "--checkpoint.interval=10",
                                    "--checkpoint.keep_latest_k=0", "--checkpoint.async_mode=" + mode});
  std::map<std::string, std::vector<float>> straight_weights;
  std::vector<nlohmann::json> straight;
  {
    train::Trainer t(job);
    auto r = t.train();
    EXPECT_EQ(r.steps_done, 20);
    straight_weights = snapshot(t.model());
    straight = read_metrics(dump);
  }
  // The step-10 checkpoint is what a run stopped after 10 steps leaves: drop step 20.
  const std::string ck = dump + "/checkpoint";
  ASSERT_EQ(step_dirs(ck), (std::map<int64_t, bool>{{10, true}, {20, true}}));
  fs::remove_all(ck + "/step-20");
  train::TrainResult r;
  std::map<std::string, std::vector<float>> resumed_weights;
  {
    train::Trainer t(job);
    r = t.train();
    resumed_weights = snapshot(t.model());
  }
  EXPECT_EQ(r.steps_done, 20);
  expect_same_weights(straight_weights, resumed_weights);
  expect_same_weights(straight_weights, checkpoint_weights(ck + "/step-20"));

  // metrics.jsonl after the resume: steps 1..10 of the first run (rows past the
  // checkpoint were trimmed), 11..20 of the second; every loss equal to the straight run's.
  const auto resumed = read_metrics(dump);
  const auto a = losses(straight), b = losses(resumed);
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 20u);
  for (const auto& [step, loss] : a) EXPECT_TRUE(same_bits(loss, b.at(step))) << "step " << step;
  double val_a = -1, val_b = -2;
  for (const auto& row : straight)
    if (row["step"] == 20 && row.contains("val_loss")) val_a = row["val_loss"];
  for (const auto& row : resumed)
    if (row["step"] == 20 && row.contains("val_loss")) val_b = row["val_loss"];
  EXPECT_TRUE(same_bits(val_a, val_b));

  // Keys of the straight run's rows.
  ASSERT_TRUE(straight[0].contains("val_loss") && straight[0]["step"] == 0) << straight[0].dump();
  std::map<int64_t, double> write_ms;
  for (const auto& row : straight) {
    if (row.contains("checkpoint_write_ms")) {
      EXPECT_GE(row["checkpoint_write_ms"].get<double>(), 0.0);
      write_ms[row["checkpoint_step"].get<int64_t>()] = row["checkpoint_write_ms"];
    }
    if (!row.contains("loss")) continue;
    const int64_t step = row["step"];
    for (const char* k : {"step", "loss", "lr", "grad_norm", "tokens_per_s", "mfu", "step_ms", "rss_mb"})
      EXPECT_TRUE(row.contains(k) && row[k].is_number()) << k << " missing in " << row.dump();
    EXPECT_GT(row["tokens_per_s"].get<double>(), 0.0);
    EXPECT_GT(row["mfu"].get<double>(), 0.0);
    EXPECT_GT(row["rss_mb"].get<double>(), 0.0);
    EXPECT_EQ(row.contains("val_loss"), step % 10 == 0) << row.dump();
    EXPECT_EQ(row.contains("checkpoint_blocking_ms"), step % 10 == 0) << row.dump();
    if (mode == "disabled" && step % 10 == 0) {
      EXPECT_EQ(row["checkpoint_step"], step) << row.dump();
    }
  }
  // Every save's write duration is logged once (asynchronous writes on a later row
  // or, for the last one, on a line of its own after training).
  EXPECT_EQ(write_ms.size(), 2u);
  EXPECT_TRUE(write_ms.count(10) && write_ms.count(20));
  fs::remove_all(dump);
}

INSTANTIATE_TEST_SUITE_P(Modes, ResumeBitwise, ::testing::Values("disabled", "async"));

// The `titan train` arguments of the process tests, and the weights an uninterrupted
// run of the same job ends with.
constexpr int kSteps = 120;
std::vector<std::string> process_args(const std::string& dump, const std::string& interval) {
  return {"--recipe=debugmodel", "--training.steps=" + std::to_string(kSteps), "--validation.enabled=false",
          "--checkpoint.enable=true", "--checkpoint.interval=" + interval, "--checkpoint.async_mode=async",
          "--checkpoint.keep_latest_k=2", "--metrics.log_freq=1000", "--job.dump_folder=" + dump};
}
const std::map<std::string, std::vector<float>>& uninterrupted_weights() {
  static const auto w = [] {
    const std::string dump = fresh_dir("straight");
    train::Trainer t(debug_job(dump, {"--training.steps=" + std::to_string(kSteps), "--validation.enabled=false"}));
    t.train();
    auto s = snapshot(t.model());
    fs::remove_all(dump);
    return s;
  }();
  return w;
}

TEST(TrainProcess, KillDuringAsyncCheckpointWrite) {
  ASSERT_TRUE(fs::exists(titan_exe())) << titan_exe() << " (build the titan_cli target)";
  const std::string dump = fresh_dir("kill9");
  const std::string ck = dump + "/checkpoint";
  // A checkpoint every step, written in the background: the writer is nearly always
  // busy. Kill when the newest step-N directory exists without its MANIFEST.
  bool hit = false;
  for (int attempt = 0; attempt < 5 && !hit; ++attempt) {
    fs::remove_all(dump);
    fs::create_directories(dump);
    Child c(process_args(dump, "1"), dump + "/run1.log");
    while (!c.exited()) {
      const auto dirs = step_dirs(ck);
      int64_t valid_max = -1, newest = -1;
      for (auto& [s, ok] : dirs) {
        newest = std::max(newest, s);
        if (ok) valid_max = std::max(valid_max, s);
      }
      if (valid_max >= 3 && newest > valid_max && !dirs.at(newest)) {
        c.kill_now(SIGKILL);
        c.wait();
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    c.wait();
    ASSERT_FALSE(WIFEXITED(c.status) && c.exit_code() != 0) << c.output();
    if (!WIFSIGNALED(c.status)) continue;  // finished before the kill: try again
    for (auto& [s, ok] : step_dirs(ck)) hit = hit || !ok;  // the kill cut a write short
  }
  ASSERT_TRUE(hit) << "no kill landed inside a checkpoint write in 5 attempts";

  // The previous checkpoint is complete and loadable.
  const auto latest = CheckpointManager::latest(ck);
  ASSERT_TRUE(latest.has_value());
  const LoadedCheckpoint prev = CheckpointManager::load(*latest);
  const int64_t s = prev.state.step;
  EXPECT_GE(s, 3);
  int64_t incomplete = -1;
  for (auto& [step, ok] : step_dirs(ck))
    if (!ok) incomplete = step;
  EXPECT_GT(incomplete, s);

  // A new start cleans the incomplete directory up, resumes from step s and finishes
  // with the weights of a run that was never killed.
  Child again(process_args(dump, "1000"), dump + "/run2.log");
  again.wait();
  const std::string out = again.output();
  ASSERT_EQ(again.exit_code(), 0) << out;
  EXPECT_NE(out.find("removed incomplete checkpoint " + ck + "/step-" + std::to_string(incomplete)),
            std::string::npos) << out;
  EXPECT_NE(out.find("resumed from " + *latest + " (step " + std::to_string(s) + ")"), std::string::npos) << out;
  for (auto& [step, ok] : step_dirs(ck)) EXPECT_TRUE(ok) << "step-" << step << " left incomplete";
  const auto final_ck = CheckpointManager::latest(ck);
  ASSERT_TRUE(final_ck.has_value());
  EXPECT_EQ(*final_ck, ck + "/step-" + std::to_string(kSteps));
  expect_same_weights(uninterrupted_weights(), checkpoint_weights(*final_ck));
  const auto l = losses(read_metrics(dump));  // each step once: rows past step s were trimmed
  EXPECT_EQ(l.size(), static_cast<size_t>(kSteps));
  fs::remove_all(dump);
}

class TrainSignal : public ::testing::TestWithParam<int> {};

TEST_P(TrainSignal, SavesCheckpointAndRestartResumes) {
  ASSERT_TRUE(fs::exists(titan_exe())) << titan_exe() << " (build the titan_cli target)";
  const int sig = GetParam();
  const std::string dump = fresh_dir("signal" + std::to_string(sig));
  const std::string ck = dump + "/checkpoint";
  Child c(process_args(dump, "1000"), dump + "/run1.log");
  // Signal once a few steps are logged.
  while (!c.exited() && read_metrics(dump).size() < 5) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  c.kill_now(sig);
  c.wait();
  const std::string out = c.output();
  ASSERT_EQ(c.exit_code(), 128 + sig) << out;
  const auto rows = read_metrics(dump);
  ASSERT_FALSE(rows.empty());
  const int64_t last = rows.back()["step"];
  ASSERT_LT(last, kSteps) << "the run ended before the signal";
  EXPECT_NE(out.find("signal " + std::to_string(sig) + " received: checkpoint saved at step " + std::to_string(last)),
            std::string::npos) << out;
  const auto latest = CheckpointManager::latest(ck);
  ASSERT_TRUE(latest.has_value()) << out;
  EXPECT_EQ(*latest, ck + "/step-" + std::to_string(last));
  EXPECT_EQ(CheckpointManager::load(*latest).state.step, last);

  Child again(process_args(dump, "1000"), dump + "/run2.log");
  again.wait();
  const std::string out2 = again.output();
  ASSERT_EQ(again.exit_code(), 0) << out2;
  EXPECT_NE(out2.find("resumed from " + *latest + " (step " + std::to_string(last) + ")"), std::string::npos)
      << out2;
  expect_same_weights(uninterrupted_weights(), checkpoint_weights(ck + "/step-" + std::to_string(kSteps)));
  EXPECT_EQ(losses(read_metrics(dump)).size(), static_cast<size_t>(kSteps));
  fs::remove_all(dump);
}

INSTANTIATE_TEST_SUITE_P(Signals, TrainSignal, ::testing::Values(SIGINT, SIGTERM));

TEST(TrainerExport, HuggingFaceExportLoadsToTheSameLogits) {
  const std::string dump = fresh_dir("export");
  train::Trainer t(debug_job(dump, {"--training.steps=3", "--validation.enabled=false", "--checkpoint.export_hf=true"}));
  t.train();
  const std::string hf = dump + "/hf";
  models::TransformerConfig cfg = models::config_from_hf(load_hf_config(hf + "/config.json"));
  EXPECT_EQ(cfg.family, t.model().config().family);
  EXPECT_EQ(cfg.tie_word_embeddings, t.model().config().tie_word_embeddings);
  models::Decoder m(cfg);
  models::load_hf_state_dict(m, load_safetensors(hf + "/model.safetensors", LoadMode::copy), hf);
  const auto b = models::make_packed_batch({{70, 105, 114, 115, 116, 32, 67, 105, 116}, {82, 79, 77, 69, 79, 58}});
  autograd::NoGradGuard ng;
  Tensor want = t.model().logits(t.model().forward(b)).contiguous();
  Tensor got = m.logits(m.forward(b)).contiguous();
  ASSERT_EQ(want.shape(), got.shape());
  EXPECT_EQ(std::memcmp(want.data<float>(), got.data<float>(), want.numel() * sizeof(float)), 0);
  fs::remove_all(dump);
}

TEST(TrainerInitialLoad, StartsFromTheExportsWeightsAndRefusesAnotherShape) {
  // checkpoint.initial_load_path: a second run starts from the first run's export, so
  // its model before any step equals the export bit for bit (and not the seed's init),
  // and its step-0 validation loss is the first run's final one.
  const std::string a = fresh_dir("initload_a"), b = fresh_dir("initload_b");
  train::Trainer first(debug_job(a, {"--training.steps=3", "--validation.freq=3", "--checkpoint.export_hf=true"}));
  const train::TrainResult ra = first.train();
  const std::map<std::string, std::vector<float>> exported = snapshot(first.model());
  train::Trainer second(debug_job(b, {"--training.steps=3", "--validation.freq=3", "--training.seed=99",
                                      "--checkpoint.initial_load_path=" + a + "/hf"}));
  EXPECT_EQ(snapshot(second.model()), exported);
  train::Trainer seeded(debug_job(fresh_dir("initload_c"), {"--training.steps=3", "--training.seed=99"}));
  EXPECT_NE(snapshot(seeded.model()), exported);
  second.train();
  const auto rows = read_metrics(b);
  ASSERT_FALSE(rows.empty());
  ASSERT_TRUE(rows[0].contains("val_loss")) << rows[0].dump();
  EXPECT_EQ(rows[0]["step"], 0);
  EXPECT_EQ(rows[0]["val_loss"].get<double>(), ra.final_val_loss);
  // Another shape: one line naming the field, the values and the fix.
  try {
    train::Trainer other(debug_job(fresh_dir("initload_d"), {"--model.n_layers=3", "--checkpoint.initial_load_path=" + a + "/hf"}));
    ADD_FAILURE() << "a 3-layer model loaded a 2-layer export";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("checkpoint.initial_load_path"), std::string::npos) << m;
    EXPECT_NE(m.find("num_hidden_layers"), std::string::npos) << m;
    EXPECT_NE(m.find("model.hf_config="), std::string::npos) << m;
  }
  fs::remove_all(a);
  fs::remove_all(b);
}

// MFU's FLOPs per token (metrics row: mfu x metrics.peak_flops / tokens_per_s) count
// attention over the keys of each token's own document: seq_len for windows of one
// text, far fewer for packed short SFT documents.
TEST(TrainerMfu, AttentionTermCountsEachTokensOwnDocument) {
  const auto flops_of = [](const std::string& recipe, std::vector<std::string> ov, const std::string& name,
                           models::TransformerConfig& cfg) {
    const std::string dump = fresh_dir(name);
    ov.insert(ov.end(), {"--training.steps=1", "--lr_scheduler.warmup_steps=0", "--validation.enabled=false",
                         "--metrics.peak_flops=1e9",
                         "--job.dump_folder=" + dump});
    train::Trainer t(config::resolve_config(recipe, std::nullopt, ov));
    t.train();
    cfg = t.model().config();
    const nlohmann::json row = read_metrics(dump).at(0);
    fs::remove_all(dump);
    return row["mfu"].get<double>() * 1e9 / row["tokens_per_s"].get<double>();
  };
  rl::register_sft_datasets();
  models::TransformerConfig text_cfg, sft_cfg;
  const double text = flops_of("debugmodel", {"--training.seq_len=64"}, "mfu_text", text_cfg);
  EXPECT_NEAR(text / text_cfg.train_flops_per_token(64), 1.0, 1e-9);
  const double sft = flops_of(
      "alphabet_sort_sft", {R"(--training.task_config={"num_samples": 64, "num_validation": 4, "max_names": 4})"},
      "mfu_sft", sft_cfg);
  // 64 demonstrations of 18067 byte tokens (~282 each), in 1024-token rows.
  EXPECT_LT(sft, sft_cfg.train_flops_per_token(512));
  EXPECT_GT(sft, sft_cfg.train_flops_per_token(128));
}

TEST(TrainerActivationCheckpoint, FullRecomputeEqualsNone) {
  // Recomputing each layer in backward gives the same bits: losses and weights of
  // 4 steps with training.activation_checkpoint=full equal those without. Neither run
  // recomputes the LM head's logits in the backward: the trainer's loss backward comes
  // with its forward (linear_cross_entropy's expected_grad = 1 / tokens matches).
  std::map<std::string, std::vector<float>> w[2];
  std::map<int64_t, double> l[2];
  double step_mem[2] = {0, 0};
  const int64_t ce_recomputes = linear_cross_entropy_recomputes();
  for (int i = 0; i < 2; ++i) {
    const std::string dump = fresh_dir(std::string("ac") + (i ? "full" : "none"));
    train::Trainer t(debug_job(dump, {"--training.steps=4", "--validation.enabled=false",
                                      std::string("--training.activation_checkpoint=") + (i ? "full" : "none")}));
    t.train();
    w[i] = snapshot(t.model());
    const auto rows = read_metrics(dump);
    l[i] = losses(rows);
    step_mem[i] = rows.back()["mem_step_mb"].get<double>();
    fs::remove_all(dump);
  }
  expect_same_weights(w[0], w[1]);
  EXPECT_EQ(linear_cross_entropy_recomputes(), ce_recomputes);
  ASSERT_EQ(l[0].size(), 4u);
  for (const auto& [step, loss] : l[0]) EXPECT_TRUE(same_bits(loss, l[1].at(step))) << "step " << step;
  EXPECT_LT(step_mem[1], step_mem[0]);  // fewer activations kept between forward and backward
}

TEST(TrainerInit, ShakespeareCharStartsNearUniform) {
  // gpt2 init (the recipe's): the step-0 validation loss is within 0.1 of ln(259);
  // the llama3 family init with tied embeddings starts far above it.
  const std::string dump = fresh_dir("init");
  auto job = config::resolve_config("shakespeare_char", std::nullopt,
                                    {"--job.dump_folder=" + dump, "--validation.steps=2"});
  const double ln_v = std::log(static_cast<double>(data::ByteTokenizer::kVocabSize));
  EXPECT_NEAR(train::Trainer(job).evaluate(), ln_v, 0.1);
  job.model.init = config::ModelInit::family;
  EXPECT_GT(train::Trainer(job).evaluate(), ln_v + 2.0);
  fs::remove_all(dump);
}

// MFU's denominator: the configured peak, or (0 = auto) the per-core peak measured for
// the ISA the kernels run (docs/benchmarks-history.md) times the pool's threads.
TEST(TrainerMfu, AutoPeakIsThePerCorePeakOfTheKernelIsaTimesThreads) {
  EXPECT_EQ(train::mfu_peak_flops(7e9), 7e9);
  const bool avx512 = titan::kernels::cpu::cpu_isa() == titan::kernels::cpu::Isa::avx512;
  EXPECT_EQ(train::mfu_peak_flops(0.0), (avx512 ? 259.5e9 : 91.5e9) * titan::num_threads());
}

TEST(TrainerHostCache, SetsTheLimitFromTheConfigAndRestoresIt) {
  const std::string dump = fresh_dir("host_cache");
  auto job = config::resolve_config("shakespeare_char", std::nullopt,
                                    {"--job.dump_folder=" + dump, "--training.host_cache_mb=37"});
  const size_t before = host_cache_limit();
  {
    train::Trainer t(job);
    EXPECT_EQ(host_cache_limit(), size_t{37} << 20);
  }
  EXPECT_EQ(host_cache_limit(), before);
  // A build that fails after setting the limit (the dataset is missing) restores it too.
  auto missing = job;
  missing.training.dataset_path = dump + "/no_such_input.txt";
  EXPECT_THROW(train::Trainer{missing}, Error);
  EXPECT_EQ(host_cache_limit(), before);
  job.training.host_cache_mb = -1;
  try {
    train::Trainer t(job);
    ADD_FAILURE() << "host_cache_mb = -1 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("training.host_cache_mb=-1"), std::string::npos)
        << e.what();
  }
  fs::remove_all(dump);
}

}  // namespace
