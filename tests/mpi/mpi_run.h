// Helpers of the tests that launch `titan` under mpirun (ctest label mpi): a child
// process with its output in a log file, the mpirun command line, metrics rows.
#pragma once
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
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

// Runs to the end; returns the exit code (output in log).
inline int run(const std::vector<std::string>& argv, const std::string& log) {
  Proc p(argv, log);
  p.wait();
  return p.exit_code();
}

}  // namespace titan::test
