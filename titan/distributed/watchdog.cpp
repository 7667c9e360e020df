#include "titan/distributed/watchdog.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "titan/core/error.h"

namespace titan::distributed {

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<const char*> g_name{nullptr};
std::atomic<int64_t> g_since_ns{0};
std::mutex g_mu;
std::condition_variable g_cv;
std::thread g_thread;
bool g_stop = false;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

double timeout_seconds() {
  const char* s = std::getenv("TITAN_COLLECTIVE_TIMEOUT_S");
  if (!s || !*s) return 600.0;
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  TITAN_CHECK(end && *end == '\0' && v >= 0.0 && v < 1e9,
              "TITAN_COLLECTIVE_TIMEOUT_S='{}' must be a number of seconds >= 0 (0 = no watchdog)", s);
  return v;
}

}  // namespace

void start_watchdog(int rank) {
  const double timeout = timeout_seconds();
  std::lock_guard<std::mutex> lk(g_mu);
  if (timeout == 0.0 || g_thread.joinable()) return;
  g_stop = false;
  g_thread = std::thread([rank, timeout] {
    std::unique_lock<std::mutex> lk(g_mu);
    while (!g_stop) {
      g_cv.wait_for(lk, std::chrono::milliseconds(200));
      const char* name = g_name.load();
      if (!name) continue;
      const double waited = (now_ns() - g_since_ns.load()) * 1e-9;
      if (waited > timeout) {
        std::fprintf(stderr,
                     "error: rank %d: collective %s has waited %.0f s (TITAN_COLLECTIVE_TIMEOUT_S=%.0f): "
                     "another rank died or hangs; ending the job\n",
                     rank, name, waited, timeout);
        std::fflush(stderr);
        std::_Exit(3);
      }
    }
  });
}

void stop_watchdog() {
  {
    std::lock_guard<std::mutex> lk(g_mu);
    g_stop = true;
  }
  g_cv.notify_all();
  if (g_thread.joinable()) g_thread.join();
}

CollectiveScope::CollectiveScope(const char* name) {
  g_since_ns.store(now_ns());
  g_name.store(name);
}

CollectiveScope::~CollectiveScope() { g_name.store(nullptr); }

}  // namespace titan::distributed
