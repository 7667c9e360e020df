// A rank killed with SIGKILL in the middle of training (ctest label mpi): the other
// rank and mpirun must stop within a bounded time, with a non-zero exit code and a
// message that names the dead rank — never hang. mpirun detects the dead process and
// ends the job; the collective watchdog (TITAN_COLLECTIVE_TIMEOUT_S) bounds a hang.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/mpi/mpi_run.h"

using namespace titan::test;

TEST(RankFailure, KilledRankStopsTheJob) {
  const std::string dump = fresh_dir("kill");
  const std::string log = dump + "/log.txt";
  setenv("TITAN_COLLECTIVE_TIMEOUT_S", "60", 1);
  Proc job(titan_argv(2, {"train", "--recipe", "debugmodel", "--training.steps=100000", "--validation.enabled=false",
                          "--job.dump_folder=" + dump}),
           log);
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  // Wait for training steps, then kill one rank.
  while (file_bytes(log).find("step     3") == std::string::npos) {
    ASSERT_FALSE(job.exited()) << file_bytes(log);
    ASSERT_LT(Clock::now() - t0, std::chrono::seconds(120)) << file_bytes(log);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::vector<pid_t> ranks = titan_children(job.pid);
  ASSERT_EQ(ranks.size(), 2u) << "ranks of mpirun " << job.pid;
  ::kill(ranks[1], SIGKILL);
  t0 = Clock::now();
  while (!job.exited()) {
    ASSERT_LT(Clock::now() - t0, std::chrono::seconds(90)) << "the job did not stop:\n" << file_bytes(log);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::string out = file_bytes(log);
  EXPECT_NE(job.exit_code(), 0) << out;
  // mpirun names the rank and the signal.
  EXPECT_NE(out.find("exited on signal 9"), std::string::npos) << out;
  EXPECT_NE(out.find("rank"), std::string::npos) << out;
  EXPECT_TRUE(titan_children(getpid()).empty());
  std::cout << "job stopped " << secs << " s after the kill\n";
}
