// The full canonical sets (labelled "full" by its executable name, ~1,100 sandboxed
// runs: about 65 ms of CPU each here, so ~35 s on 2 idle cores): every MBPP task's
// reference code passes all of its test_list asserts and every HumanEval canonical
// solution passes all of check()'s asserts. Failures are listed by id.
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "titan/rl/code_exec.h"

namespace titan::rl {
namespace {

void check_all(const std::vector<TaskSample>& samples, const char* what) {
  std::vector<std::string> programs;
  for (const TaskSample& s : samples) programs.push_back(program_for(s, code_reference_reply(s)));
  // Generous limits: this checks that the references are correct, not how fast a loaded
  // CI machine runs them (mbpp/123, a brute-force amicable-number sum, takes several
  // seconds alone and exceeded the default 10 s wall clock beside other tests).
  CodeExecConfig cfg;
  cfg.limits.timeout_s = 120.0;
  cfg.limits.cpu_s = 60;
  const auto results = run_code_tests_parallel(samples, programs, cfg, 2);
  int ok = 0, asserts = 0;
  std::vector<std::string> failed;
  for (size_t i = 0; i < samples.size(); ++i) {
    asserts += results[i].total;
    if (results[i].run_ok && results[i].total > 0 && results[i].passed == results[i].total) {
      ++ok;
    } else {
      std::string why = results[i].reason;
      for (const std::string& e : results[i].test_errors)
        if (!e.empty() && why.empty()) why = e;
      failed.push_back(samples[i].id + " (" + std::to_string(results[i].passed) + "/" +
                       std::to_string(results[i].total) + ": " + why + ")");
    }
  }
  std::printf("%s: canonical solutions pass %d/%zu tasks (%d asserts)\n", what, ok, samples.size(), asserts);
  for (const std::string& f : failed) std::printf("  failed: %s\n", f.c_str());
  EXPECT_TRUE(failed.empty());
}

TEST(CodeExecFull, AllMbppCanonicalSolutionsPass) { check_all(load_mbpp(mbpp_path()), "MBPP"); }

TEST(CodeExecFull, AllHumanEvalCanonicalSolutionsPass) { check_all(load_humaneval(humaneval_path()), "HumanEval"); }

}  // namespace
}  // namespace titan::rl
