// Progress lines (progress.h).
#include "titan/core/progress.h"

#include <fmt/core.h>

#include <chrono>
#include <cstdio>

namespace titan {

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

Progress::Progress(std::string label, int64_t total, std::string unit, double first_after_s, double every_s)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(total),
      t0_ns_(now_ns()),
      first_ns_(static_cast<int64_t>(first_after_s * 1e9)),
      every_ns_(static_cast<int64_t>(every_s * 1e9)),
      next_ns_(t0_ns_ + first_ns_) {}

Progress::~Progress() {
  if (lines_ > 0) print(done_.load(), true);
}

void Progress::add(int64_t n) {
  const int64_t d = done_.fetch_add(n) + n;
  const int64_t t = now_ns();
  int64_t next = next_ns_.load();
  if (t < next || !next_ns_.compare_exchange_strong(next, t + every_ns_)) return;
  print(d, false);
}

void Progress::print(int64_t d, bool last) {
  std::lock_guard lk(mu_);
  const double s = static_cast<double>(now_ns() - t0_ns_) * 1e-9;
  const bool mb = unit_ == "MB";
  const double scale = mb ? 1e-6 : 1.0;
  const std::string amount =
      mb ? fmt::format("{:.1f}/{:.1f} MB", d * scale, total_ * scale) : fmt::format("{}/{} {}", d, total_, unit_);
  const double pct = total_ > 0 ? 100.0 * static_cast<double>(d) / static_cast<double>(total_) : 100.0;
  fmt::print(stderr, "{}: {} ({:.0f} %), {:.1f} s{}\n", label_, amount, pct, s, last ? ", done" : "");
  std::fflush(stderr);
  ++lines_;
}

}  // namespace titan
