#include "titan/core/host_alloc.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <utility>

namespace titan {

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitizedAddresses = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitizedAddresses = true;
#else
constexpr bool kSanitizedAddresses = false;
#endif
#else
constexpr bool kSanitizedAddresses = false;
#endif

struct Cache {
  std::mutex mu;
  // Free blocks by size class, each list in the order they were freed (seq ascending).
  std::map<size_t, std::deque<std::pair<uint64_t, void*>>> free;
  size_t bytes = 0, limit = 0;
  size_t base = 0;              // set_host_cache_limit's value
  std::multiset<size_t> holds;  // live ScopedHostCacheLimit holders
  // The limit in force: max(base, holders); releases what it no longer covers. Needs mu.
  void apply() {
    limit = std::max(base, holds.empty() ? size_t{0} : *holds.rbegin());
    trim(limit);
  }
  uint64_t seq = 0;

  // Releases the least recently freed blocks until at most `keep` bytes stay cached.
  // Needs mu.
  void trim(size_t keep) {
    while (bytes > keep) {
      auto oldest = free.begin();
      for (auto it = free.begin(); it != free.end(); ++it)
        if (it->second.front().first < oldest->second.front().first) oldest = it;
      std::free(oldest->second.front().second);
      bytes -= oldest->first;
      oldest->second.pop_front();
      if (oldest->second.empty()) free.erase(oldest);
    }
  }
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: blocks may be freed during static teardown
  return *c;
}

}  // namespace

size_t host_alloc_size(size_t nbytes) {
  const size_t n = host_aligned_bytes(nbytes);
  if (n < kHostCacheMinBytes) return n;
  const size_t gran = std::bit_floor(n) / 8;  // classes 1/8 of a power of two apart
  return (n + gran - 1) / gran * gran;
}

void* host_alloc(size_t nbytes) {
  const size_t n = host_alloc_size(nbytes);
  if (n >= kHostCacheMinBytes) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.free.find(n);
    if (it != c.free.end()) {  // the class's most recently freed block (the warmest)
      void* p = it->second.back().second;
      it->second.pop_back();
      if (it->second.empty()) c.free.erase(it);
      c.bytes -= n;
      return p;
    }
  }
  if (void* p = std::aligned_alloc(64, n)) return p;
  host_cache_release();
  return std::aligned_alloc(64, n);
}

void host_free(void* p, size_t nbytes) {
  if (p == nullptr) return;
  const size_t n = host_alloc_size(nbytes);
  if (n >= kHostCacheMinBytes) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    if (n <= c.limit && !kSanitizedAddresses) {
      c.free[n].emplace_back(c.seq++, p);
      c.bytes += n;
      c.trim(c.limit);
      return;
    }
  }
  std::free(p);
}

size_t host_cache_bytes() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.bytes;
}

size_t host_cache_limit() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.limit;
}

void set_host_cache_limit(size_t bytes) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.base = bytes;
  c.apply();
}
ScopedHostCacheLimit::ScopedHostCacheLimit(size_t bytes) : bytes_(bytes) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.holds.insert(bytes);
  c.apply();
}
ScopedHostCacheLimit::~ScopedHostCacheLimit() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.holds.erase(c.holds.find(bytes_));
  c.apply();
}

void host_cache_release() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.trim(0);
}

}  // namespace titan
