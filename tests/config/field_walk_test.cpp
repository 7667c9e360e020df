// No silent knobs: every field of the job config, found by reflection
// (titan/config/reflect.h), is set to a valid non-default value on top of a tiny
// baseline run of `titan train` and of `titan rl`, and must either
//   - be refused by that command (config::refuse_unused_fields: one line naming the
//     field and the command, as the CLI prints it with exit code 2), or
//   - change what the run does: its metrics rows (timing and memory values dropped,
//     keys kept), the files it writes (paths, and sizes of tensor files; config.toml,
//     which records every field, is left out), its console output with digits removed,
//     or it fails with an error where the baseline ran. The baseline is run twice
//     first: its fingerprint must repeat exactly.
// Values are tried in turn until one passes config validation. A field that is read
// but changes nothing at this size (e.g. a performance setting with the same bits by
// design) is listed in kCheckedElsewhere with the test that covers it; a stale entry
// fails. A new field needs no edit here: it is walked like the others, and fails
// when it is silently ignored.
//
// Fields that other work is turning from silent into honoured or refused (the
// parallel degrees) are in kPending: walked, reported when still
// silent, not failed. Once they are refused or honoured they pass as any field does.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "titan/config/command_fields.h"
#include "titan/config/field_text.h"
#include "titan/config/recipes.h"
#include "titan/config/resolve.h"
#include "titan/config/transforms.h"
#include "titan/core/error.h"
#include "titan/rl/controller.h"
#include "titan/rl/rubric.h"
#include "titan/rl/tasks.h"
#include "titan/train/trainer.h"

namespace titan::config {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Fields whose effect a short run cannot show, per command ("*" = both), with where
// they are checked instead.
const std::map<std::string, std::pair<std::string, std::string>> kCheckedElsewhere = {
    {"job.dump_folder", {"*", "set by this walk for every run; every test reads its outputs from there"}},
    {"job.description", {"*", "descriptive: recorded in config.toml (config_test round trip)"}},
    {"model.flavor",
     {"*", "descriptive: the preset the shape fields came from; naming another one on the command line is "
           "refused (config_test)"}},
    {"model.applied_transforms", {"*", "bookkeeping of model.transforms (config_test transform tests)"}},
    {"training.host_cache_mb", {"train", "memory reuse only, same bits (host_alloc_test)"}},
    {"training.activation_checkpoint", {"train", "same bits in less memory (trainer_test ActivationCheckpoint)"}},
    {"training.skip_nonfinite_steps", {"*", "acts on a diverged step only (failures_cli_test DivergingRun...)"}},
    {"checkpoint.async_mode", {"*", "same files and bits by design (trainer_test ResumeBitwise/async, kill tests)"}},
    {"checkpoint.resume", {"*", "acts only when a checkpoint exists (trainer_test, rl_controller_test resume)"}},
    {"metrics.peak_flops", {"train", "changes mfu only, a timing-derived value (checked below: MfuUsesPeakFlops)"}},
    {"generator.host_cache_bytes", {"rl", "memory reuse only, same bits (engine_test host cache)"}},
    {"generator.enable_prefix_caching", {"rl", "same tokens and logprobs by design (engine_test prefix caching)"}},
    {"generator.max_num_seqs", {"rl", "scheduling only: batch invariance gives the same bits (engine_test)"}},
    {"generator.max_num_batched_tokens", {"rl", "scheduling only: batch invariance gives the same bits (engine_test)"}},
    {"rl.max_error_fraction", {"rl", "acts on failed rollouts only (rl_failures_test)"}},
    {"model.init", {"rl", "the rl baseline is qwen3, whose family init is the gpt2 one (decoder.cpp); the train walk (llama3) shows it"}},
    {"rl.algorithm", {"rl", "grpo and dapo aggregate alike when every completion has max_tokens tokens (rl_policy_loss_test aggregations)"}},
    {"rl.dynamic_sampling", {"rl", "acts only on groups with all-equal rewards, which the graded reward here never gives (no test yet)"}},
    {"rl.max_total_tokens", {"rl", "caps prompt + completion over the turns of an episode (rl_rollouter_test)"}},
    {"rl.val_samples", {"rl", "the random-init policy's greedy answers score alike here (rl_controller_test val_reward)"}},
    {"rl.env", {"rl", "this walk injects the alphabet_sort task with a graded reward; make_task(rl.env) is rl_task_test's"}},
    {"rl.epsilon_low", {"rl", "on-policy with bitwise parity the ratio is exactly 1: the clip never binds (rl_policy_loss_test)"}},
    {"rl.epsilon_high", {"rl", "on-policy with bitwise parity the ratio is exactly 1: the clip never binds (rl_policy_loss_test)"}},
    {"rl.max_turns", {"rl", "alphabet_sort is single-turn (rl_rollouter_test multi-turn episodes)"}},
};

// Silent today, being made honoured or refused by other work: reported, not failed.
const std::vector<std::string> kPending = {};

bool listed(const std::string& path, const std::string& cmd) {
  auto it = kCheckedElsewhere.find(path);
  return it != kCheckedElsewhere.end() && (it->second.first == "*" || it->second.first == cmd);
}
bool pending(const std::string& path) {
  for (const auto& p : kPending)
    if (p.back() == '.' ? path.rfind(p, 0) == 0 : path == p) return true;
  return false;
}

struct Baseline {
  std::string command, recipe;
  std::vector<std::string> overrides;
};

const fs::path& work_dir() {
  static const fs::path d = fs::temp_directory_path() / ("titan_field_walk_" + std::to_string(::getpid()));
  return d;
}

Baseline train_baseline() {
  return {"train",
          "debugmodel",
          {"training.steps=3", "training.seq_len=16", "training.local_batch_size=2", "model.dim=16",
           "model.n_layers=1", "model.n_heads=2", "model.ffn_hidden_dim=32", "validation.enabled=true",
           "validation.freq=2", "validation.steps=1", "lr_scheduler.warmup_steps=1", "checkpoint.enable=true",
           "checkpoint.interval=1", "checkpoint.keep_latest_k=2", "metrics.log_freq=2"}};
}

Baseline rl_baseline() {
  return {"rl",
          "alphabet_sort_grpo",
          {"rl.init_from=", "model.dim=32", "model.n_layers=1", "model.n_heads=2", "model.n_kv_heads=1",
           "model.head_dim=16", "model.ffn_hidden_dim=64", "training.seq_len=512", "training.steps=2",
           "rl.rollouts_per_step=8", "rl.group_size=4", "generator.max_tokens=6", "generator.kv_cache_bytes=8388608",
           "rl.val_freq=2", "rl.val_samples=2", "rl.overlong_buffer_len=2",
           R"(rl.env_config={"num_samples": 64, "num_validation": 4, "max_names": 3})", "checkpoint.interval=1",
           "checkpoint.keep_latest_k=2", "metrics.log_freq=2", "lr_scheduler.warmup_steps=1"}};
}

bool timing_key(const std::string& k) {
  return k.ends_with("_ms") || k.ends_with("_per_s") || k.ends_with("_mb") || k == "mfu";
}

// Everything a run shows except timings: metrics rows, rollouts, files, console text.
std::string fingerprint(const fs::path& dump, const std::string& console) {
  std::ostringstream out;
  for (const char* log : {"metrics.jsonl", "rollouts.jsonl"}) {
    std::ifstream in(dump / log);
    out << "[" << log << (in ? "" : " absent") << "]\n";
    for (std::string line; std::getline(in, line);) {
      json row = json::parse(line, nullptr, false);
      if (row.is_object())
        for (auto it = row.begin(); it != row.end(); ++it)
          if (timing_key(it.key())) it.value() = "t";
      out << row.dump() << "\n";
    }
  }
  std::set<std::string> files;
  for (auto& e : fs::recursive_directory_iterator(dump)) {
    const std::string rel = fs::relative(e.path(), dump).string();
    if (rel == "config.toml") continue;
    // Sizes of tensor files only: JSON files carry timings (checkpoint state.json).
    const bool tensors = rel.ends_with(".safetensors");
    files.insert(rel + (e.is_directory() ? "/" : tensors ? " " + std::to_string(e.file_size()) : ""));
  }
  for (const auto& f : files) out << f << "\n";
  for (char ch : console)
    if (ch < '0' || ch > '9') out << ch;
  return out.str();
}

struct Outcome {
  enum Kind { invalid, refused, ran, failed } kind = invalid;
  std::string message, fingerprint;
};

// Resolves baseline + extra override as the CLI does, then runs it in this process
// with stdout captured.
Outcome run(const Baseline& b, const std::optional<std::string>& extra) {
  const fs::path dump = work_dir() / b.command;
  fs::remove_all(dump);
  std::vector<std::string> ov = b.overrides;
  ov.push_back("job.dump_folder=" + dump.string());
  if (extra) ov.push_back(*extra);
  Outcome o;
  JobConfig c;
  try {
    c = resolve_config(b.recipe, std::nullopt, ov);
  } catch (const Error& e) {
    o.message = e.what();
    return o;  // invalid value: the caller tries another
  }
  try {
    std::vector<std::string> keys;
    if (extra) keys.push_back(extra->substr(0, extra->find('=')));
    refuse_unused_fields(c, make_recipe(b.recipe), b.command, keys);
  } catch (const Error& e) {
    o.kind = Outcome::refused;
    o.message = e.what();
    return o;
  }
  fs::create_directories(dump);
  const fs::path console = work_dir() / "console.txt";
  std::fflush(stdout);
  const int saved = ::dup(1);
  FILE* f = std::fopen(console.c_str(), "w");
  ::dup2(::fileno(f), 1);
  o.kind = Outcome::ran;
  try {
    if (b.command == "train") {
      train::run_train_job(c);
    } else {
      // The task of rl.env_config with a graded reward (the share of lowercase letters):
      // a random-init policy scores 0 on the real rubric, so its advantages and
      // gradients would be 0 and no optimizer field could show.
      rl::TaskSpec t = rl::make_task("alphabet_sort", json::parse(c.rl.env_config));
      std::vector<rl::RewardFn> fns{{"lower_share", 1.0, [](const rl::Rollout& r) {
                                       if (r.completions.empty() || r.completions[0].empty()) return 0.0;
                                       const std::string& x = r.completions[0];
                                       return static_cast<double>(std::count_if(x.begin(), x.end(), [](char ch) {
                                                return ch >= 'a' && ch <= 'z';
                                              })) /
                                              static_cast<double>(x.size());
                                     }}};
      t.rubric = rl::Rubric(fns);
      rl::RLController ctl(c, std::move(t));
      ctl.run();
    }
  } catch (const std::exception& e) {
    o.kind = Outcome::failed;
    o.message = e.what();
  }
  std::fflush(stdout);
  ::dup2(saved, 1);
  ::close(saved);
  std::fclose(f);
  std::ifstream in(console);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  o.fingerprint = fingerprint(dump, text);
  return o;
}

std::string number_text(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

// Valid-looking non-default values of field `f` (whose current value is read from
// the baseline's resolved config), most natural first.
std::vector<std::string> candidates(const FieldRef& f) {
  std::vector<std::string> out;
  auto add = [&](const std::string& v) {
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  };
  switch (f.kind) {
    case FieldKind::boolean: add(*static_cast<const bool*>(f.ptr) ? "false" : "true"); break;
    case FieldKind::i32:
    case FieldKind::i64: {
      const int64_t v = f.kind == FieldKind::i32 ? *static_cast<const int*>(f.ptr) : *static_cast<const int64_t*>(f.ptr);
      for (int64_t x : {v + 1, 2 * v, v - 1, int64_t{1}, int64_t{2}, int64_t{3}, int64_t{8}, int64_t{64},
                        int64_t{512}, int64_t{4096}, int64_t{0}, v / 2, int64_t{1} << 20})
        if (x != v && x >= -1) add(std::to_string(x));
      break;
    }
    case FieldKind::f64: {
      const double v = *static_cast<const double*>(f.ptr);
      for (double x : {v * 0.5, v * 2.0, v + 0.25, 0.5, 0.1, 0.9, 0.0, 1.0, 2.0, 1e-3, 1e-6, 1e-9})
        if (x != v) add(number_text(x));
      break;
    }
    case FieldKind::enumeration: {
      const int cur = f.enum_ops->get(f.ptr);
      const auto& names = f.enum_ops->names();
      for (int i = 0; i < static_cast<int>(names.size()); ++i)
        if (i != cur) add(names[static_cast<size_t>(i)]);
      break;
    }
    case FieldKind::string: {
      const std::string v = *static_cast<const std::string*>(f.ptr);
      static const std::map<std::string, std::vector<std::string>> known = {
          {"model.name", {"qwen3", "llama3"}},
          {"model.tokenizer_path", {"byte_chat", "byte"}},
          {"training.dataset", {"rl_task_sft", "text"}},
          {"rl.env", {"gsm8k", "alphabet_sort"}},
          {"parallelism.pipeline_parallel_schedule", {"GPipe", "Interleaved1F1B"}},
          {"parallelism.fsdp_reshard_after_forward", {"never"}},
          {"rl.env_config", {R"({"num_samples": 64, "num_validation": 4, "max_names": 4})"}},
      };
      if (auto it = known.find(f.path); it != known.end())
        for (const auto& x : it->second)
          if (x != v) add(x);
      add(v == "titan-walk" ? "titan-walk-2" : "titan-walk");
      break;
    }
    case FieldKind::string_list:
      if (f.path == "model.transforms")
        for (const auto& t : list_transforms()) add(t.name);
      add("titan-walk");
      break;
    case FieldKind::i64_list:
      add("1");
      add("1,2");
      break;
    case FieldKind::f64_list:
      add("0.5");
      add("0.5,1");
      break;
  }
  return out;
}

void walk(const Baseline& b) {
  fs::create_directories(work_dir());
  const Outcome base = run(b, std::nullopt);
  ASSERT_EQ(base.kind, Outcome::ran) << "baseline " << b.command << ": " << base.message;
  // The comparison means something only if the baseline repeats itself exactly.
  ASSERT_EQ(run(b, std::nullopt).fingerprint, base.fingerprint) << "the baseline run is not deterministic";
  JobConfig resolved;
  {
    std::vector<std::string> ov = b.overrides;
    resolved = resolve_config(b.recipe, std::nullopt, ov);
  }
  const FieldTable table = reflect(resolved);
  int refused = 0, changed = 0, elsewhere = 0;
  std::vector<std::string> still_pending;
  for (const FieldRef& f : table.fields) {
    if (listed(f.path, b.command)) {
      ++elsewhere;
      continue;
    }
    std::string verdict, tried, how;
    for (const std::string& v : candidates(f)) {
      const Outcome o = run(b, f.path + "=" + v);
      tried += (tried.empty() ? "" : ", ") + v;
      if (o.kind == Outcome::invalid) continue;
      if (o.kind == Outcome::refused) {
        // The refusal is one line naming the command. When it names another field, this
        // one was read: it turned a baseline setting off (e.g. checkpoint.enable=false
        // makes the baseline's checkpoint.interval unused).
        EXPECT_NE(o.message.find("titan " + b.command), std::string::npos) << o.message;
        EXPECT_EQ(o.message.find('\n'), std::string::npos) << o.message;
        verdict = o.message.rfind(f.path + "=", 0) == 0 ? "refused" : "changed";
        how = v + ": " + o.message;
        break;
      }
      if (o.kind == Outcome::failed || o.fingerprint != base.fingerprint) {
        verdict = "changed";
        how = v + (o.kind == Outcome::failed ? ": the run failed: " + o.message : ": the run differs");
        break;
      }
    }
    std::printf("  %s %s: %s %s\n", b.command.c_str(), f.path.c_str(), verdict.empty() ? "SILENT" : verdict.c_str(),
                how.substr(0, 160).c_str());
    if (verdict == "refused") {
      ++refused;
    } else if (verdict == "changed") {
      ++changed;
    } else if (pending(f.path)) {
      still_pending.push_back(f.path);
    } else {
      ADD_FAILURE() << "titan " << b.command << ": " << f.path << " (tried " << tried
                    << ") neither was refused nor changed the run. Honour it, refuse it in "
                       "titan/config/command_fields.cpp, or list it in kCheckedElsewhere with the test that covers it";
    }
  }
  std::printf("titan %s: %zu fields: %d refused, %d change the run, %d checked elsewhere, %zu pending (%s)\n",
              b.command.c_str(), table.fields.size(), refused, changed, elsewhere, still_pending.size(),
              fmt::format("{}", fmt::join(still_pending, ", ")).c_str());
}

TEST(FieldWalk, ListedFieldsExist) {
  JobConfig c;
  const FieldTable t = reflect(c);
  for (const auto& [path, why] : kCheckedElsewhere) EXPECT_NE(t.find(path), nullptr) << "stale entry " << path;
}

TEST(FieldWalk, EveryTrainFieldChangesTheRunOrIsRefused) { walk(train_baseline()); }

TEST(FieldWalk, EveryRLFieldChangesTheRunOrIsRefused) { walk(rl_baseline()); }

// metrics.peak_flops: mfu = FLOPs per token x tokens/s / peak, so mfu x peak / tokens/s
// is the same for two peaks.
TEST(FieldWalk, MfuUsesPeakFlops) {
  Baseline b = train_baseline();
  std::map<double, double> ratio;
  for (double peak : {1e9, 4e9}) {
    const fs::path dump = work_dir() / "mfu";
    fs::remove_all(dump);
    std::vector<std::string> ov = b.overrides;
    ov.push_back("job.dump_folder=" + dump.string());
    ov.push_back("metrics.peak_flops=" + number_text(peak));
    ov.push_back("validation.enabled=false");
    train::Trainer t(resolve_config(b.recipe, std::nullopt, ov));
    t.train();
    std::ifstream in(dump / "metrics.jsonl");
    std::string line;
    std::getline(in, line);
    const json row = json::parse(line);
    ratio[peak] = row["mfu"].get<double>() * peak / row["tokens_per_s"].get<double>();
  }
  EXPECT_GT(ratio[1e9], 0.0);
  EXPECT_NEAR(ratio[1e9] / ratio[4e9], 1.0, 1e-9);
}

}  // namespace
}  // namespace titan::config
