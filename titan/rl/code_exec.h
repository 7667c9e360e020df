// code_exec: program-synthesis tasks (MBPP, HumanEval) rewarded by running the
// model's program and the task's tests in a sandbox (sandbox.h).
//
// Program: the code of the first ```python fenced block of the reply (any fenced
// block if none is tagged python), else the raw reply text. HumanEval: when the
// code defines `def <entry_point>(` it is appended to the task prompt (so the
// prompt's imports and helper functions exist); otherwise it is taken as the
// completion of the prompt's function body (prompt + code, the HumanEval format).
//
// Run (run_code_tests): /usr/bin/python3 -I -S -B harness.py in the sandbox with
// task.json (program, MBPP test_setup_code, the tests). The harness
// (code_harness.cpp) is the grader: it deletes task.json, runs the program in a
// worker process of its own and the tests itself, with the program's functions
// as proxies that exchange only data with the worker; the verdict is written by
// the grader on the sandbox's result channel, which the program's process cannot
// reach (so patching the harness, fake reports, os._exit, SystemExit, patched
// builtins or objects equal to anything gain nothing:
// tests/rl/rl_code_exec_forgery_test.cpp). Reward = the fraction of tests that
// passed. When the run fails as a whole (the program raises, exits or dies
// before its tests, a crash, timeout, memory or process limit, no report) the
// reward function throws a titan::Error with the reason, which a Rubric records as
// value 0 with that reason.
//
//   TaskSample.prompt    MBPP {"text", "tests_shown": [...]}; HumanEval {"prompt", "entry_point"}
//   TaskSample.reference {"kind": "mbpp" | "humaneval", "solution": canonical code,
//                         MBPP: "tests": [...], "setup": "...";
//                         HumanEval: "prompt", "test", "entry_point"}
//   TaskSample.metadata  {"file", "line", "task_id", "split"}
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "titan/rl/env.h"
#include "titan/rl/rollout.h"
#include "titan/rl/sandbox.h"
#include "titan/rl/task.h"

namespace titan::rl {

struct CodeExecConfig {
  std::string python = "/usr/bin/python3";  // absolute path
  SandboxLimits limits;                     // whole run: wall clock, CPU, memory, files, processes
  double test_timeout_s = 0.0;              // per test (SIGALRM in the harness); 0 = off
  bool include_challenge_tests = false;     // MBPP challenge_test_list
  // Keys: python, timeout_s, cpu_s, memory_bytes, file_bytes, max_processes,
  // output_bytes, test_timeout_s, include_challenge_tests. Unknown keys: titan::Error.
  static CodeExecConfig from_json(const nlohmann::json& j);
};

// MBPP jsonl (keys text, code, task_id, test_setup_code, test_list,
// challenge_test_list; "\r\n" and lone "\r" in code and tests become "\n"). Ids "mbpp/<task_id>"; metadata
// split by task_id as in google-research/mbpp README: 1-10 "prompt" (few-shot),
// 11-510 "test", 511-600 "validation", 601-974 "train". Throws titan::Error naming
// file:line for malformed lines or missing keys.
std::vector<TaskSample> load_mbpp(const std::string& path, bool include_challenge_tests = false);
// HumanEval jsonl (task_id, prompt, entry_point, canonical_solution, test). Ids
// "humaneval/<n>" for "HumanEval/<n>".
std::vector<TaskSample> load_humaneval(const std::string& path);
// Default files under titan::config::shared_data_dir().
std::string mbpp_path();
std::string humaneval_path();

// The code to run for a reply: fenced python code, else the raw text.
std::string code_from_reply(std::string_view reply);
// The whole program for a sample and a reply (see the header comment).
std::string program_for(const TaskSample& sample, std::string_view reply);

struct CodeRunResult {
  int passed = 0;
  int total = 0;
  bool run_ok = false;     // the harness reported and the program itself ran
  std::string reason;      // why run_ok is false ("" when ok)
  std::vector<std::string> test_errors;  // per test: "" or the error
  SandboxResult sandbox;
  double fraction() const { return total > 0 ? static_cast<double>(passed) / total : 0.0; }
};

// Runs program against the sample's tests. Never throws for what the program does;
// throws titan::Error for a sample without the reference fields.
CodeRunResult run_code_tests(const TaskSample& sample, const std::string& program, const CodeExecConfig& cfg);

// run_code_tests for many (sample, program) pairs on `workers` threads (>= 1), each
// running one sandbox at a time. Results in input order.
std::vector<CodeRunResult> run_code_tests_parallel(const std::vector<TaskSample>& samples,
                                                   const std::vector<std::string>& programs,
                                                   const CodeExecConfig& cfg, int workers);

// Reward: fraction of tests passed by the last completion's program; throws
// titan::Error with the reason when the run fails as a whole (see above).
double code_exec_reward(const Rollout& r, const CodeExecConfig& cfg);

struct CodeEnvConfig {
  std::string system_prompt;  // empty: none
};

// Single turn: init gives the task prompt (MBPP: description + the tests it must
// pass; HumanEval: the function signature and docstring), step ends the episode.
class CodeExecEnv final : public MessageEnv {
 public:
  explicit CodeExecEnv(CodeEnvConfig cfg = {}) : cfg_(std::move(cfg)) {}
  std::vector<ChatMessage> init(const TaskSample& sample) override;
  StepResult step(const std::string& reply) override { return StepResult{{}, true}; }

 private:
  CodeEnvConfig cfg_;
};

// The canonical solution as a reply: a ```python block (HumanEval: prompt + body).
std::string code_reference_reply(const TaskSample& sample);

// The harness source (code_harness.cpp).
const char* code_exec_harness_source();

}  // namespace titan::rl
