// Host memory for tensor storage and kernel scratch, with a cache of large blocks.
//
// A training step allocates and frees the same large buffers every step (activations,
// gradients, the fused loss's logits tile and packed weights). Straight from malloc,
// buffers above glibc's mmap threshold come back as fresh zero pages every time, and
// the kernel's page faults and page clearing cost a few % of a `small` step
// (docs/benchmarks-history.md, Training). host_alloc keeps freed blocks of at least
// kHostCacheMinBytes in a cache and hands them out again for the same size class, the
// idea of PyTorch's CUDA caching allocator applied to host memory.
//
// - Blocks are 64-byte aligned. Requests are rounded up to 64 bytes; those that reach
//   kHostCacheMinBytes then to a size class (at most 1/8 above the request) so that a
//   cached block fits any request of its class; smaller ones go to aligned_alloc / free
//   untouched.
// - The cache holds at most host_cache_limit() bytes of free blocks, least recently
//   freed released first. The limit is 0 (no caching) until someone sets it: the
//   trainer holds `training.host_cache_mb`, since its steps repeat the same sizes; the
//   generator's engine holds a small one (5 % of weights + KV pool by default: its
//   memory bound leaves 10 %), which takes the page faults out of prefill.
//   Under AddressSanitizer nothing is cached, so that a use after free stays visible.
// - Contents of a returned block are unspecified (a reused block holds old data).
// - Thread-safe (one mutex, taken only for blocks >= kHostCacheMinBytes).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

namespace titan {

inline constexpr size_t kHostCacheMinBytes = size_t{1} << 20;

// nbytes rounded up to a multiple of 64, at least 64: what a block of nbytes covers
// before any size-class rounding (and what tensor storage counts as live).
inline constexpr size_t host_aligned_bytes(size_t nbytes) {
  return nbytes <= 64 ? 64 : (nbytes + 63) / 64 * 64;
}

// The number of bytes host_alloc(nbytes) actually reserves (>= nbytes, >= 64, a multiple
// of 64; the size class for nbytes >= kHostCacheMinBytes).
size_t host_alloc_size(size_t nbytes);
// A 64-byte aligned block of host_alloc_size(nbytes) bytes, or nullptr when the system
// is out of memory (after releasing the cache and trying once more).
void* host_alloc(size_t nbytes);
// Returns a block from host_alloc(nbytes) (the same nbytes); nullptr is ignored.
void host_free(void* p, size_t nbytes);

// Bytes of free blocks held by the cache.
size_t host_cache_bytes();
// The cache's limit in bytes in force: max(the value set here, live ScopedHostCacheLimit
// holders). Setting it releases blocks beyond the new limit in force.
size_t host_cache_limit();
void set_host_cache_limit(size_t bytes);
// Releases every cached block to the system.
void host_cache_release();

// Holds the cache limit at >= bytes for its lifetime: the trainer holds
// training.host_cache_mb, the generator's engine EngineConfig::host_cache_bytes. The
// limit in force is the largest of set_host_cache_limit's value and every live
// holder's, so holders may end in any order (an engine built before a trainer and
// destroyed while it trains leaves the trainer's limit in force). A constructor that
// throws half-way still drops its holder.
class ScopedHostCacheLimit {
 public:
  explicit ScopedHostCacheLimit(size_t bytes);
  ~ScopedHostCacheLimit();
  ScopedHostCacheLimit(const ScopedHostCacheLimit&) = delete;
  ScopedHostCacheLimit& operator=(const ScopedHostCacheLimit&) = delete;

 private:
  size_t bytes_;
};

// An owning array of n T (trivially constructible) from host_alloc; contents unspecified.
template <typename T>
class HostArray {
 public:
  HostArray() = default;
  explicit HostArray(size_t n)
      : p_(static_cast<T*>(host_alloc(n * sizeof(T))), Free{n * sizeof(T)}) {
    if (!p_ && n > 0) throw std::bad_alloc();
  }
  T* get() const { return p_.get(); }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  struct Free {
    size_t nbytes = 0;
    void operator()(T* p) const { host_free(p, nbytes); }
  };
  std::unique_ptr<T, Free> p_;
};

}  // namespace titan
