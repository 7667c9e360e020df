// host_alloc: size classes, reuse of freed blocks, the cache limit (least recently
// freed released first), and Storage's zero fill on a reused block.
#include "titan/core/host_alloc.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "titan/core/storage.h"

using namespace titan;

namespace {
constexpr size_t MiB = size_t{1} << 20;

#if defined(__SANITIZE_ADDRESS__)
#define SKIP_UNDER_ASAN() GTEST_SKIP() << "host_alloc caches nothing under AddressSanitizer"
#else
#define SKIP_UNDER_ASAN() (void)0
#endif

// Restores the process's cache limit (0 unless a trainer set it) after each test.
struct LimitGuard {
  size_t old = host_cache_limit();
  ~LimitGuard() {
    host_cache_release();
    set_host_cache_limit(old);
  }
};
}  // namespace

TEST(HostAlloc, SizeClasses) {
  EXPECT_EQ(host_alloc_size(0), 64u);
  EXPECT_EQ(host_alloc_size(1), 64u);
  EXPECT_EQ(host_alloc_size(65), 128u);
  EXPECT_EQ(host_alloc_size(MiB - 64), MiB - 64);  // below the cached sizes: 64-byte rounding
  EXPECT_EQ(host_alloc_size(MiB - 1), MiB);
  EXPECT_EQ(host_alloc_size(MiB), MiB);
  EXPECT_EQ(host_alloc_size(MiB + 1), MiB + MiB / 8);
  EXPECT_EQ(host_alloc_size(3 * MiB), 3 * MiB);
  EXPECT_EQ(host_alloc_size(3 * MiB + 5), 3 * MiB + 256 * 1024);  // 2 MiB / 8 steps
  std::mt19937_64 rng(3);
  for (int i = 0; i < 2000; ++i) {
    const size_t n = MiB + rng() % (512 * MiB);
    const size_t c = host_alloc_size(n);
    EXPECT_GE(c, n);
    EXPECT_LE(c - n, n / 8) << n;  // at most 1/8 above the request
    EXPECT_EQ(c % 64, 0u);
    EXPECT_EQ(host_alloc_size(c), c) << n;  // a class size is its own class
  }
}

TEST(HostAlloc, NoCachingWithLimitZero) {
  LimitGuard g;
  set_host_cache_limit(0);
  void* p = host_alloc(4 * MiB);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  host_free(p, 4 * MiB);
  EXPECT_EQ(host_cache_bytes(), 0u);
}

TEST(HostAlloc, ReusesTheClassesMostRecentlyFreedBlock) {
  SKIP_UNDER_ASAN();
  LimitGuard g;
  set_host_cache_limit(64 * MiB);
  const size_t n = 3 * MiB + 100;
  void* a = host_alloc(n);
  void* b = host_alloc(n);
  std::memset(a, 1, n);
  host_free(a, n);
  host_free(b, n);
  EXPECT_EQ(host_cache_bytes(), 2 * host_alloc_size(n));
  // Any request of the same class gets a cached block, the most recently freed first.
  EXPECT_EQ(host_alloc(n + 1000), b);
  EXPECT_EQ(host_alloc(n - 50), a);
  EXPECT_EQ(host_cache_bytes(), 0u);
  // Another class does not.
  void* c = host_alloc(8 * MiB);
  EXPECT_NE(c, a);
  EXPECT_NE(c, b);
  host_free(a, n - 50);
  host_free(b, n + 1000);
  host_free(c, 8 * MiB);
  EXPECT_EQ(host_cache_bytes(), 2 * host_alloc_size(n) + 8 * MiB);
  host_cache_release();
  EXPECT_EQ(host_cache_bytes(), 0u);
}

TEST(HostAlloc, LimitReleasesTheLeastRecentlyFreed) {
  SKIP_UNDER_ASAN();
  LimitGuard g;
  set_host_cache_limit(5 * MiB);
  void* p[3];
  for (auto& x : p) x = host_alloc(2 * MiB);
  for (auto* x : p) host_free(x, 2 * MiB);
  EXPECT_EQ(host_cache_bytes(), 4 * MiB);  // p[0] went back to the system
  EXPECT_EQ(host_alloc(2 * MiB), p[2]);
  EXPECT_EQ(host_alloc(2 * MiB), p[1]);
  EXPECT_EQ(host_cache_bytes(), 0u);
  host_free(p[1], 2 * MiB);
  host_free(p[2], 2 * MiB);
  // A block larger than the limit is never cached; lowering the limit trims.
  void* big = host_alloc(6 * MiB);
  host_free(big, 6 * MiB);
  EXPECT_EQ(host_cache_bytes(), 4 * MiB);
  set_host_cache_limit(2 * MiB);
  EXPECT_EQ(host_cache_bytes(), 2 * MiB);
  EXPECT_EQ(host_alloc(2 * MiB), p[2]);  // the older p[1] was released
  host_free(p[2], 2 * MiB);
}

TEST(HostAlloc, EvictionIsLeastRecentlyFreedAcrossClasses) {
  SKIP_UNDER_ASAN();
  LimitGuard g;
  set_host_cache_limit(6 * MiB);
  void* a = host_alloc(2 * MiB);
  void* b = host_alloc(4 * MiB);
  void* c = host_alloc(2 * MiB);
  // Freed a, b, c: a (the small class's older block) goes; b and c stay.
  host_free(a, 2 * MiB);
  host_free(b, 4 * MiB);
  host_free(c, 2 * MiB);
  EXPECT_EQ(host_cache_bytes(), 6 * MiB);
  EXPECT_EQ(host_alloc(4 * MiB), b);
  EXPECT_EQ(host_alloc(2 * MiB), c);
  EXPECT_EQ(host_cache_bytes(), 0u);
  a = host_alloc(2 * MiB);
  // Freed b, a, c: b (the large class, oldest) goes, though its class is not the
  // smallest and its class's newest block is not the newest.
  host_free(b, 4 * MiB);
  host_free(a, 2 * MiB);
  host_free(c, 2 * MiB);
  EXPECT_EQ(host_cache_bytes(), 4 * MiB);
  EXPECT_EQ(host_alloc(2 * MiB), c);
  EXPECT_EQ(host_alloc(2 * MiB), a);
  EXPECT_EQ(host_cache_bytes(), 0u);
  host_free(a, 2 * MiB);
  host_free(c, 2 * MiB);
}

TEST(HostAlloc, BlockOfExactlyTheLimitIsCached) {
  SKIP_UNDER_ASAN();
  LimitGuard g;
  set_host_cache_limit(2 * MiB);
  void* p = host_alloc(2 * MiB);
  host_free(p, 2 * MiB);
  EXPECT_EQ(host_cache_bytes(), 2 * MiB);
  EXPECT_EQ(host_alloc(2 * MiB), p);
  host_free(p, 2 * MiB);
}

TEST(HostAlloc, FailedAllocationReleasesTheCacheAndReturnsNull) {
  SKIP_UNDER_ASAN();
  LimitGuard g;
  set_host_cache_limit(16 * MiB);
  host_free(host_alloc(8 * MiB), 8 * MiB);
  ASSERT_EQ(host_cache_bytes(), 8 * MiB);
  EXPECT_EQ(host_alloc(size_t{1} << 52), nullptr);  // 4 PiB: no system gives that
  EXPECT_EQ(host_cache_bytes(), 0u);                // released before the retry
  EXPECT_THROW(HostArray<float>(size_t{1} << 50), std::bad_alloc);
}

TEST(HostAlloc, StorageZeroFillOnAReusedBlock) {
  SKIP_UNDER_ASAN();
  LimitGuard g;
  set_host_cache_limit(64 * MiB);
  const size_t n = 5 * MiB;
  void* first = nullptr;
  {
    Storage s(n, Device::cpu());
    std::memset(s.data(), 0x5a, n);
    first = s.data();
  }
  Storage z(n, Device::cpu(), /*zero_fill=*/true);
  EXPECT_EQ(z.data(), first);  // the same block came back...
  const auto* bytes = static_cast<const unsigned char*>(z.data());
  size_t nonzero = 0;
  for (size_t i = 0; i < n; ++i) nonzero += bytes[i] != 0;
  EXPECT_EQ(nonzero, 0u);  // ...and was cleared
}

TEST(HostAlloc, ThreadsAllocAndFreeConcurrently) {
  SKIP_UNDER_ASAN();
  LimitGuard g;
  set_host_cache_limit(32 * MiB);
  auto work = [](uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<std::pair<void*, size_t>> live;
    for (int i = 0; i < 400; ++i) {
      if (live.size() < 6 && rng() % 2) {
        const size_t n = MiB / 2 + rng() % (4 * MiB);
        auto* p = static_cast<unsigned char*>(host_alloc(n));
        ASSERT_NE(p, nullptr);
        p[0] = p[n - 1] = 7;  // the whole request is usable
        live.emplace_back(p, n);
      } else if (!live.empty()) {
        host_free(live.back().first, live.back().second);
        live.pop_back();
      }
    }
    for (auto& [p, n] : live) host_free(p, n);
  };
  std::thread t1(work, 1), t2(work, 2);
  t1.join();
  t2.join();
  EXPECT_LE(host_cache_bytes(), 32 * MiB);
  host_cache_release();
  EXPECT_EQ(host_cache_bytes(), 0u);
}

// Holders combine by max with the set limit and may end in any order: an engine's small
// hold built before a trainer's large one and dropped while the trainer lives leaves
// the trainer's limit; the last holder to go restores the set value.
TEST(HostAlloc, ScopedHoldersCombineByMaxInAnyOrder) {
  LimitGuard g;
  set_host_cache_limit(3 * MiB);
  auto engine = std::make_unique<ScopedHostCacheLimit>(16 * MiB);
  EXPECT_EQ(host_cache_limit(), 16 * MiB);
  auto trainer = std::make_unique<ScopedHostCacheLimit>(64 * MiB);
  EXPECT_EQ(host_cache_limit(), 64 * MiB);
  engine.reset();
  EXPECT_EQ(host_cache_limit(), 64 * MiB);
  {
    ScopedHostCacheLimit small(MiB);  // below the limit in force: no change
    EXPECT_EQ(host_cache_limit(), 64 * MiB);
  }
  set_host_cache_limit(5 * MiB);  // the set value under a larger holder
  EXPECT_EQ(host_cache_limit(), 64 * MiB);
  trainer.reset();
  EXPECT_EQ(host_cache_limit(), 5 * MiB);
}

// A dropped holder releases the cached blocks its limit no longer covers.
TEST(HostAlloc, DroppingAHolderTrimsTheCache) {
  SKIP_UNDER_ASAN();
  LimitGuard g;
  set_host_cache_limit(0);
  {
    ScopedHostCacheLimit hold(8 * MiB);
    host_free(host_alloc(4 * MiB), 4 * MiB);
    EXPECT_EQ(host_cache_bytes(), 4 * MiB);
  }
  EXPECT_EQ(host_cache_limit(), 0u);
  EXPECT_EQ(host_cache_bytes(), 0u);
}
