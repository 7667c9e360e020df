// Progress lines: silent for short waits, then rate-limited lines, and a last line
// only when something was printed; add() from many threads counts every unit.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "titan/core/progress.h"

namespace titan {
namespace {

TEST(Progress, ShortWaitPrintsNothing) {
  Progress p("short", 100, "items");  // first line only after 2 s
  for (int i = 0; i < 100; ++i) p.add(1);
  EXPECT_EQ(p.done(), 100);
  EXPECT_EQ(p.lines(), 0);
}

TEST(Progress, LongWaitPrintsRateLimitedLines) {
  Progress p("long", 4, "items", /*first_after_s=*/0.05, /*every_s=*/0.05);
  p.add(1);  // before first_after_s: silent
  EXPECT_EQ(p.lines(), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  p.add(1);  // prints
  p.add(1);  // within every_s of the last line: silent
  EXPECT_EQ(p.lines(), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  p.add(1);
  EXPECT_EQ(p.lines(), 2);
}

TEST(Progress, ConcurrentAddsCountEveryUnit) {
  Progress p("threads", 4000, "items", 0.0, 0.001);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) p.add(1);
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(p.done(), 4000);
  EXPECT_GE(p.lines(), 1);
}

}  // namespace
}  // namespace titan
