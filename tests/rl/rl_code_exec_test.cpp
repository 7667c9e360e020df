// code_exec: MBPP / HumanEval loaders, program assembly, partial credit, a
// deterministic subset of canonical solutions, and hostile programs (infinite loop,
// fork bomb, huge allocation, sys.exit, segfault) that must score 0 with a reason
// without harming this process. The full canonical sets: rl_code_exec_full_test.
#include <unistd.h>

#include <gtest/gtest.h>

#include "titan/core/error.h"
#include "titan/rl/code_exec.h"
#include "titan/rl/tasks.h"

namespace titan::rl {
namespace {

using nlohmann::json;

const std::vector<TaskSample>& mbpp() {
  static const std::vector<TaskSample> s = load_mbpp(mbpp_path());
  return s;
}
const std::vector<TaskSample>& humaneval() {
  static const std::vector<TaskSample> s = load_humaneval(humaneval_path());
  return s;
}

// Canonical solutions need well under a second of CPU; the wall-clock limit is loose so
// that a loaded machine (2 cores, many test processes) does not time them out.
CodeExecConfig fast_config() {
  CodeExecConfig c;
  c.limits.timeout_s = 30.0;
  c.limits.cpu_s = 5;
  return c;
}

TEST(CodeLoaders, MbppAndHumanEval) {
  const auto& m = mbpp();
  ASSERT_EQ(m.size(), 974u);
  EXPECT_EQ(m[0].id, "mbpp/1");
  std::map<std::string, int> splits;
  for (const TaskSample& s : m) {
    ++splits[s.metadata["split"].get<std::string>()];
    EXPECT_EQ(s.reference["solution"].get<std::string>().find('\r'), std::string::npos) << s.id;
    EXPECT_GE(s.reference["tests"].size(), 1u);
  }
  EXPECT_EQ(splits, (std::map<std::string, int>{{"prompt", 10}, {"test", 500}, {"validation", 90}, {"train", 374}}));
  EXPECT_EQ(m[0].reference["tests"][0], "assert min_cost([[1, 2, 3], [4, 8, 2], [1, 5, 3]], 2, 2) == 8");
  const auto& h = humaneval();
  ASSERT_EQ(h.size(), 164u);
  EXPECT_EQ(h[0].id, "humaneval/0");
  EXPECT_EQ(h[0].reference["entry_point"], "has_close_elements");
  EXPECT_EQ(h[163].metadata["task_id"], "HumanEval/163");
}

TEST(CodeProgram, ExtractionAndAssembly) {
  EXPECT_EQ(code_from_reply("Here:\n```python\ndef f():\n    return 1\n```\nDone."), "def f():\n    return 1\n");
  EXPECT_EQ(code_from_reply("def f(): return 1"), "def f(): return 1");
  const TaskSample& h = humaneval()[0];
  const std::string prompt = h.reference["prompt"];
  // A body completion (HumanEval's own format) continues the prompt.
  EXPECT_EQ(program_for(h, "    return False\n"), prompt + "    return False\n");
  // A full function is appended after the prompt (imports and helpers stay available).
  const std::string full = "```python\ndef has_close_elements(numbers, threshold):\n    return False\n```";
  EXPECT_EQ(program_for(h, full), prompt + "\ndef has_close_elements(numbers, threshold):\n    return False\n");
  EXPECT_EQ(program_for(mbpp()[0], "```python\nx = 1\n```"), "x = 1\n");
}

TEST(CodeCanonical, DeterministicSubsetPassesThroughTheTask) {
  // Every 49th MBPP task and every 15th HumanEval task (20 + 11), through the
  // environment, the reference reply and the rubric; then the same programs in
  // parallel (2 workers).
  std::vector<TaskSample> subset;
  for (size_t i = 0; i < mbpp().size(); i += 49) subset.push_back(mbpp()[i]);
  for (size_t i = 0; i < humaneval().size(); i += 15) subset.push_back(humaneval()[i]);
  const CodeExecConfig cfg = fast_config();
  std::vector<std::string> programs;
  for (const TaskSample& s : subset) programs.push_back(program_for(s, code_reference_reply(s)));
  const auto results = run_code_tests_parallel(subset, programs, cfg, 2);
  for (size_t i = 0; i < subset.size(); ++i) {
    EXPECT_TRUE(results[i].run_ok) << subset[i].id << ": " << results[i].reason;
    EXPECT_EQ(results[i].passed, results[i].total) << subset[i].id;
    EXPECT_GE(results[i].total, 1) << subset[i].id;
  }
  // Three through the whole task: env prompt, scripted reply, rubric.
  const TaskSpec task = make_task("mbpp", {{"timeout_s", 30.0}});
  for (const TaskSample& s : {mbpp()[10], mbpp()[600], mbpp()[900]}) {
    auto env = task.make_env();
    const auto first = env->init(s);
    EXPECT_NE(first.back().content.find(s.reference["tests"][0].get<std::string>()), std::string::npos);
    Rollout r = run_episode(*env, s, scripted_generator(assistant_replies(task.demonstration(s))));
    task.rubric.score(r);
    EXPECT_EQ(r.total_reward, 1.0) << s.id << " " << r.to_json().dump();
  }
  // HumanEval as a raw body completion (no fence).
  const TaskSample& h = humaneval()[2];
  const CodeRunResult body = run_code_tests(h, program_for(h, h.reference["solution"].get<std::string>()), cfg);
  EXPECT_TRUE(body.run_ok) << body.reason;
  EXPECT_EQ(body.passed, body.total);
  EXPECT_GE(body.total, 2);  // check() split into its asserts
}

TEST(CodePartialCredit, FractionOfAsserts) {
  const TaskSample& s = mbpp()[0];  // min_cost: expects 8, 12, 16
  const CodeExecConfig cfg = fast_config();
  CodeRunResult r = run_code_tests(s, "def min_cost(cost, m, n):\n    return 8\n", cfg);
  EXPECT_TRUE(r.run_ok) << r.reason;
  EXPECT_EQ(r.passed, 1);
  EXPECT_EQ(r.total, 3);
  EXPECT_NE(r.test_errors[1].find("AssertionError"), std::string::npos) << r.test_errors[1];
  // Per-test timeout: one looping case fails alone.
  CodeExecConfig per_test = cfg;
  per_test.test_timeout_s = 0.5;
  r = run_code_tests(s,
                     "def min_cost(cost, m, n):\n"
                     "    while cost[0][0] == 3:\n        pass\n"
                     "    return {1: 8, 2: 12}[cost[0][0]]\n",
                     per_test);
  EXPECT_TRUE(r.run_ok) << r.reason;
  EXPECT_EQ(r.passed, 2);
  EXPECT_NE(r.test_errors[2].find("timed out"), std::string::npos) << r.test_errors[2];
  // Printing a fake report on stdout counts for nothing.
  r = run_code_tests(s, "print('{\"tests\": [{\"ok\": true}, {\"ok\": true}, {\"ok\": true}]}')\n", cfg);
  EXPECT_EQ(r.passed, 0);
  // HumanEval partial credit through check()'s split asserts.
  const TaskSample& h = humaneval()[0];
  r = run_code_tests(h, program_for(h, "    return True\n"), cfg);
  EXPECT_TRUE(r.run_ok) << r.reason;
  EXPECT_GT(r.passed, 0);
  EXPECT_LT(r.passed, r.total);
}

struct Hostile {
  const char* name;
  const char* program;
  const char* reason;  // substring of the recorded reason
};

TEST(CodeHostile, ScoreZeroWithReasonAndLeaveThisProcessAlone) {
  const std::vector<Hostile> cases = {
      {"infinite loop", "def min_cost(c, m, n):\n    return 8\nwhile True:\n    pass\n", "timed out"},
      {"loop in a test", "def min_cost(c, m, n):\n    while True:\n        pass\n", "timed out"},
      {"fork bomb", "import os\nwhile True:\n    os.fork()\n", "program failed: BlockingIOError"},
      {"huge allocation", "x = bytearray(1 << 40)\n", "program failed: MemoryError"},
      {"huge list", "x = [0] * (10 ** 10)\n", "program failed: MemoryError"},
      {"sys.exit", "import sys\nsys.exit(3)\n", "program failed: SystemExit: 3"},
      {"os._exit", "import os\nos._exit(0)\n", "program failed: the program's process exited (exit code 0)"},
      {"segfault", "import ctypes\nctypes.string_at(0)\n", "program failed: the program's process was killed by signal 11"},
      {"syntax error", "def min_cost(:\n", "program failed: SyntaxError"},
      {"wrong name", "def other():\n    pass\n", ""},  // runs fine, every assert fails -> 0 without error
  };
  CodeExecConfig cfg = fast_config();
  cfg.limits.timeout_s = 1.5;
  const Rubric rubric({{"tests_passed", 1.0, [cfg](const Rollout& r) { return code_exec_reward(r, cfg); }}});
  const pid_t me = getpid();
  for (const Hostile& h : cases) {
    Rollout r;
    r.sample = mbpp()[0];
    r.completions = {std::string("```python\n") + h.program + "```"};
    r.status = RolloutStatus::completed;
    rubric.score(r);
    EXPECT_EQ(r.total_reward, 0.0) << h.name;
    if (*h.reason) {
      EXPECT_NE(r.rewards[0].error.find(h.reason), std::string::npos) << h.name << ": " << r.rewards[0].error;
    } else {
      EXPECT_EQ(r.rewards[0].error, "") << h.name;
    }
  }
  EXPECT_EQ(getpid(), me);
  // The sandbox still works afterwards.
  const CodeRunResult ok = run_code_tests(mbpp()[0], program_for(mbpp()[0], code_reference_reply(mbpp()[0])), cfg);
  EXPECT_EQ(ok.passed, 3) << ok.reason;
}

TEST(CodeErrors, BadSamplesAndConfig) {
  TaskSample bad = mbpp()[0];
  bad.reference.erase("kind");
  EXPECT_THROW(run_code_tests(bad, "x = 1", fast_config()), Error);
  Rollout r;
  r.sample = bad;
  r.completions = {"x"};
  const Rubric rubric({{"tests_passed", 1.0, [](const Rollout& ro) { return code_exec_reward(ro, CodeExecConfig{}); }}});
  rubric.score(r);
  EXPECT_EQ(r.total_reward, 0.0);
  EXPECT_NE(r.rewards[0].error.find("reference.kind"), std::string::npos) << r.rewards[0].error;
  EXPECT_THROW(CodeExecConfig::from_json({{"python", "python3"}}), Error);
  EXPECT_THROW(CodeExecConfig::from_json({{"timeout", 3}}), Error);
  EXPECT_EQ(CodeExecConfig::from_json({{"timeout_s", 3}}).limits.timeout_s, 3.0);
  EXPECT_THROW(make_task("mbpp", {{"train_splits", json::array({"nope"})}}), Error);
  EXPECT_THROW(load_mbpp("/nonexistent/mbpp.jsonl"), Error);
  EXPECT_THROW(run_code_tests_parallel({mbpp()[0]}, {}, fast_config(), 2), Error);
  const TaskSpec he = make_task("humaneval", {{"num_validation", 20}});
  EXPECT_EQ(he.train->size(), 144);
  EXPECT_EQ(he.validation->size(), 20);
}

}  // namespace
}  // namespace titan::rl
