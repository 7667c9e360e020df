// Progress lines for long waits (tokenising a dataset, reading a checkpoint): nothing
// while the wait is short; after first_after_s seconds one line on stderr at most
// every every_s seconds,
//   "tokenising data/input.txt: 12.5/40.1 MB (31 %), 3.2 s"
// and a last line when the work is done, if any line was printed. add() is
// thread-safe (parallel loops call it from every worker).
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

namespace titan {

class Progress {
 public:
  // total: units of work (bytes when unit == "MB": printed as MB). Prints nothing yet.
  Progress(std::string label, int64_t total, std::string unit = "MB", double first_after_s = 2.0,
           double every_s = 2.0);
  // The "done" line, if an earlier line was printed.
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void add(int64_t n);
  int64_t done() const { return done_.load(); }
  // The number of lines printed so far (tests).
  int lines() const { return lines_; }

 private:
  void print(int64_t done, bool last);
  std::string label_, unit_;
  int64_t total_;
  int64_t t0_ns_, first_ns_, every_ns_;
  std::atomic<int64_t> done_{0};
  std::atomic<int64_t> next_ns_;
  std::mutex mu_;
  int lines_ = 0;
};

}  // namespace titan
