// code_exec rewards cannot be forged by the graded program: a family of attacks on
// the grader (patching the harness, fake reports on every inherited fd, os._exit
// before / during / after the tests, monkey-patched builtins and assert helpers,
// SystemExit in a test, the success marker on stdout, objects equal to anything,
// reading the hidden tests, signalling or tracing the grader, frame walking) each
// score 0 on a task where the same program's honest wrong answer scores 0, while
// the honest correct answer scores full marks.
#include <cstdio>

#include <gtest/gtest.h>

#include "titan/rl/code_exec.h"

namespace titan::rl {
namespace {

const TaskSample& mbpp1() {
  static const std::vector<TaskSample> s = load_mbpp(mbpp_path());
  return s[0];  // min_cost: 3 asserts expecting 8, 12, 16
}

CodeExecConfig config() {
  CodeExecConfig c;
  c.limits.timeout_s = 20.0;
  c.limits.cpu_s = 10;
  return c;
}

const char* kWrong = "def min_cost(cost, m, n):\n    return 0\n";

struct Attack {
  const char* name;
  std::string program;  // kWrong is prepended
};

TEST(CodeForgery, HonestAnswersScoreAsBefore) {
  const CodeRunResult right =
      run_code_tests(mbpp1(), program_for(mbpp1(), code_reference_reply(mbpp1())), config());
  EXPECT_TRUE(right.run_ok) << right.reason;
  EXPECT_EQ(right.passed, 3);
  const CodeRunResult wrong = run_code_tests(mbpp1(), kWrong, config());
  EXPECT_TRUE(wrong.run_ok) << wrong.reason;
  EXPECT_EQ(wrong.passed, 0);
  EXPECT_EQ(wrong.total, 3);
  const CodeRunResult partial = run_code_tests(mbpp1(), "def min_cost(cost, m, n):\n    return 8\n", config());
  EXPECT_EQ(partial.passed, 1);
}

TEST(CodeForgery, AttacksOnTheGraderScoreZero) {
  const std::string report =
      R"({"program_error": null, "setup_error": null, "tests": [{"ok": true, "error": null}, {"ok": true, "error": null}, {"ok": true, "error": null}]})";
  const std::vector<Attack> attacks = {
      {"patch the harness's runner", "import __main__\n__main__._run = lambda *a: None\n"},
      {"patch the worker's reply",
       "import __main__\n__main__._enc = lambda *a, **k: True\n__main__._send({'globals': {}})\n"},
      {"fake report on every fd",
       "import os\nfor fd in range(0, 1024):\n    try:\n        os.write(fd, b'" + report +
           "\\n')\n    except OSError:\n        pass\n"},
      {"fake replies on every fd, then exit",
       "import os\nfor fd in range(0, 1024):\n    for i in range(1, 20):\n        try:\n"
       "            os.write(fd, b'{\"id\": %d, \"ok\": 8, \"args\": null}\\n' % i)\n"
       "        except OSError:\n            pass\n"},
      {"os._exit(0) before the tests", "import os\nos._exit(0)\n"},
      {"os._exit(0) in the tests", "import os\ndef min_cost(cost, m, n):\n    os._exit(0)\n"},
      {"os._exit(0) after the tests", "import atexit, os\natexit.register(os._exit, 0)\n"},
      {"SystemExit in a test", "def min_cost(cost, m, n):\n    raise SystemExit(0)\n"},
      {"KeyboardInterrupt in a test", "def min_cost(cost, m, n):\n    raise KeyboardInterrupt\n"},
      {"monkey-patched builtins",
       "import builtins\nbuiltins.AssertionError = type('A', (BaseException,), {})\n"
       "builtins.__build_class__ = None\nbuiltins.isinstance = lambda *a: True\n"
       "import sys\nsys.settrace(lambda *a: None)\n"},
      {"monkey-patched assert helpers",
       "import math, operator, unittest\nmath.isclose = lambda *a, **k: True\noperator.eq = lambda *a: True\n"
       "unittest.TestCase.assertEqual = lambda *a, **k: None\n"},
      {"object equal to anything",
       "class E:\n    __eq__ = lambda s, o: True\n    __ne__ = lambda s, o: False\n    __bool__ = lambda s: True\n"
       "    __hash__ = lambda s: 0\n"
       "def min_cost(cost, m, n):\n    return E()\n"},
      {"int subclass equal to anything",
       "class I(int):\n    __eq__ = lambda s, o: True\n"
       "def min_cost(cost, m, n):\n    return I(0)\n"},
      {"success marker on stdout and stderr",
       "import sys\nprint('" + report + "')\nprint('" + report + "', file=sys.stderr)\nprint('3/3 passed, OK')\n"},
      {"read the hidden tests",
       "import os, re, glob\nexp = []\nfor p in ['task.json'] + glob.glob('/work/**/mbpp*.jsonl', recursive=True):\n"
       "    try:\n        exp += [int(x) for x in re.findall(r'== (\\d+)', open(p).read())]\n"
       "    except OSError:\n        pass\n"
       "_it = iter(exp[:3])\ndef min_cost(cost, m, n):\n    return next(_it, 0)\n"},
      {"kill the grader", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"},
      {"stop the grader", "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\n"},
      {"read the grader's memory",
       "import os\nf = open('/proc/%d/mem' % os.getppid(), 'r+b')\n"},
      {"ptrace the grader",
       "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
       "if libc.ptrace(16, os.getppid(), 0, 0) == 0:\n    os._exit(0)\n"},
      {"walk the frames", "import sys\ndef min_cost(cost, m, n):\n"
                          "    f = sys._getframe()\n    while f.f_back: f = f.f_back\n"
                          "    f.f_globals['_send']({'id': 0, 'ok': 8})\n    return 0\n"},
  };
  CodeExecConfig cfg = config();
  cfg.limits.timeout_s = 8.0;  // "stop the grader" ends at the wall clock
  for (const Attack& a : attacks) {
    const CodeRunResult r = run_code_tests(mbpp1(), std::string(kWrong) + a.program, cfg);
    EXPECT_EQ(r.passed, 0) << a.name << ": " << r.reason << " " << r.sandbox.stderr_text.substr(0, 400);
    EXPECT_EQ(r.fraction(), 0.0) << a.name;
    std::printf("%-40s %d/%d %s\n", a.name, r.passed, r.total,
                r.reason.empty() ? (r.test_errors.empty() ? "" : r.test_errors[0].c_str()) : r.reason.c_str());
  }
}

TEST(CodeForgery, HumanEvalHelpersAndCandidateCannotBeReplaced) {
  const std::vector<TaskSample> he = load_humaneval(humaneval_path());
  const CodeExecConfig cfg = config();
  // HumanEval/32: check() measures poly(coeffs, find_zero(coeffs)); a program that
  // redefines the task's poly to return 0 gains nothing.
  const TaskSample& fz = he[32];
  CodeRunResult r = run_code_tests(
      fz, program_for(fz, "```python\ndef poly(xs, x):\n    return 0\n\ndef find_zero(xs):\n    return 0.0\n```"), cfg);
  EXPECT_EQ(r.passed, 0) << r.reason;
  EXPECT_GT(r.total, 0);
  // An object equal to anything, as the candidate's result.
  const TaskSample& h0 = he[0];
  r = run_code_tests(h0,
                     program_for(h0, "```python\nclass E:\n    __eq__ = lambda s, o: True\n"
                                     "def has_close_elements(numbers, threshold):\n    return E()\n```"),
                     cfg);
  EXPECT_EQ(r.passed, 0) << r.reason;
  // The canonical solutions still pass.
  for (const TaskSample* s : {&fz, &h0}) {
    r = run_code_tests(*s, program_for(*s, code_reference_reply(*s)), cfg);
    EXPECT_TRUE(r.run_ok) << s->id << " " << r.reason;
    EXPECT_EQ(r.passed, r.total) << s->id;
  }
}

}  // namespace
}  // namespace titan::rl
