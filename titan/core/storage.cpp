#include "titan/core/storage.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "titan/core/error.h"
#include "titan/core/host_alloc.h"
#include "titan/core/memory_stats.h"

namespace titan {

namespace {
std::atomic<int64_t> g_live{0}, g_peak{0};
void count_alloc(int64_t n) {
  const int64_t now = g_live.fetch_add(n, std::memory_order_relaxed) + n;
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}
}  // namespace

int64_t storage_bytes_live() { return g_live.load(std::memory_order_relaxed); }
int64_t storage_bytes_peak() { return g_peak.load(std::memory_order_relaxed); }
void reset_storage_peak() { g_peak.store(g_live.load(std::memory_order_relaxed), std::memory_order_relaxed); }

Storage::Storage(size_t nbytes, Device device, bool zero_fill) : nbytes_(nbytes), device_(device) {
  TITAN_CHECK(device.is_cpu(), "Storage: device {} has no CUDA implementation in this build",
              device.str());
  data_ = host_alloc(nbytes);
  TITAN_CHECK(data_ != nullptr, "Storage: failed to allocate {} bytes", nbytes);
  // Counted as live: host_aligned_bytes, not host_alloc's size class, whose untouched
  // tail costs no memory.
  const size_t n = host_aligned_bytes(nbytes);
  count_alloc(static_cast<int64_t>(n));
  if (zero_fill) std::memset(data_, 0, n);
}

Storage::Storage(void* data, size_t nbytes, std::shared_ptr<void> owner)
    : data_(data), nbytes_(nbytes), owned_(false), owner_(std::move(owner)) {}

Storage::~Storage() {
  if (owned_) {
    host_free(data_, nbytes_);
    g_live.fetch_sub(static_cast<int64_t>(host_aligned_bytes(nbytes_)), std::memory_order_relaxed);
  }
}

}  // namespace titan
