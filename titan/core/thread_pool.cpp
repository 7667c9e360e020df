#include "titan/core/thread_pool.h"

#include <immintrin.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "titan/core/error.h"

namespace titan {
namespace {

thread_local bool tl_in_pool_task = false;

class Pool {
 public:
  explicit Pool(int n) { resize(n); }
  ~Pool() { stop_workers(); }

  int size() const { return nthreads_; }

  void resize(int n) {
    stop_workers();
    nthreads_ = n;
    stop_ = false;
    // New workers start from the current generation (and no range of it is claimable):
    // a job posted before a resize (whose fn is gone) must not be run by them.
    const uint64_t gen = generation_.load(std::memory_order_acquire);
    claimed_ = std::make_unique<std::atomic<uint64_t>[]>(n);
    for (int t = 0; t < n; ++t) claimed_[t].store(gen, std::memory_order_relaxed);
    for (int t = 1; t < n; ++t) workers_.emplace_back([this, t, gen] { worker(t, gen); });
  }

  // Posts the job, runs range 0, then runs every range no worker has claimed yet
  // (a descheduled worker on a busy machine never stalls the caller), then waits for
  // the ranges workers are running. A range's arithmetic does not depend on which
  // thread runs it (all threads share the canonical MXCSR), so results are the same.
  void run(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
    const int T = static_cast<int>(std::min<int64_t>(nthreads_, n));
    std::vector<std::exception_ptr> errs(T);
    uint64_t gen;
    {
      std::lock_guard<std::mutex> lk(mu_);
      job_ = &fn;
      job_n_ = n;
      job_T_ = T;
      errs_ = &errs;
      pending_.store(T - 1, std::memory_order_release);
      gen = generation_.fetch_add(1, std::memory_order_acq_rel) + 1;
    }
    cv_.notify_all();
    run_range(0, T, n, fn, errs);
    for (int t = 1; t < T; ++t) {
      if (claim(t, gen)) {
        run_range(t, T, n, fn, errs);
        pending_.fetch_sub(1, std::memory_order_acq_rel);
      }
    }
    // Only ranges that workers claimed (and are running) remain.
    int spins = 0;
    while (pending_.load(std::memory_order_acquire) > 0) {
      if (++spins < 4000) _mm_pause(); else std::this_thread::yield();
    }
    for (auto& e : errs) if (e) std::rethrow_exception(e);
  }

 private:
  // Range t of job `gen` is run by whoever claims it first (the caller or worker t).
  // claimed_[t] holds the newest generation for which range t was claimed; a worker
  // that woke late for an old job cannot claim (its generation is not newer), so it
  // never runs a finished job's fn.
  bool claim(int t, uint64_t gen) {
    uint64_t cur = claimed_[t].load(std::memory_order_acquire);
    while (cur < gen) {
      if (claimed_[t].compare_exchange_weak(cur, gen, std::memory_order_acq_rel)) return true;
    }
    return false;
  }

  static void run_range(int t, int T, int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                        std::vector<std::exception_ptr>& errs) {
    int64_t b = n * t / T, e = n * (t + 1) / T;
    if (b >= e) return;
    tl_in_pool_task = true;
    try { fn(b, e); } catch (...) { errs[t] = std::current_exception(); }
    tl_in_pool_task = false;
  }

  void worker(int t, uint64_t seen) {
    set_canonical_fp_state();
    for (;;) {
      // Spin for a short while before blocking: kernels are called back to back.
      int spins = 0;
      while (generation_.load(std::memory_order_acquire) == seen && spins < 20000) {
        _mm_pause();
        ++spins;
      }
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || generation_.load(std::memory_order_acquire) != seen; });
      if (stop_) return;
      seen = generation_.load(std::memory_order_acquire);
      auto* fn = job_;
      int64_t n = job_n_;
      int T = job_T_;
      auto* errs = errs_;
      lk.unlock();
      if (t < T && claim(t, seen)) {
        run_range(t, T, n, *fn, *errs);
        pending_.fetch_sub(1, std::memory_order_acq_rel);
      }
    }
  }

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }

  int nthreads_ = 1;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::unique_ptr<std::atomic<uint64_t>[]> claimed_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_T_ = 1;
  std::vector<std::exception_ptr>* errs_ = nullptr;
  bool stop_ = false;
};

// More workers than this is a typo, not a machine: each costs a stack and a wakeup
// per parallel region.
constexpr int kMaxThreads = 1024;

int default_threads() {
  if (const char* s = std::getenv("TITAN_NUM_THREADS"); s && *s) {
    char* end = nullptr;
    const long n = std::strtol(s, &end, 10);
    TITAN_CHECK(*end == '\0' && n >= 1 && n <= kMaxThreads, "TITAN_NUM_THREADS={} must be an integer in [1, {}]",
                s, kMaxThreads);
    return static_cast<int>(n);
  }
  unsigned hc = std::thread::hardware_concurrency();
  int cores = hc ? static_cast<int>(hc) : 1;
  // Ranks started by mpirun on this machine share its cores.
  if (const char* s = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) {
    int local = std::atoi(s);
    if (local > 1) cores /= local;
  }
  return cores >= 1 ? cores : 1;
}

std::mutex g_pool_mu;
Pool& pool() {
  static Pool p(default_threads());
  return p;
}

}  // namespace

void set_canonical_fp_state() {
  // Round to nearest, all exceptions masked, FTZ and DAZ off.
  _mm_setcsr(0x1F80);
}

int num_threads() { return pool().size(); }

void set_num_threads(int n) {
  TITAN_CHECK(n >= 1 && n <= kMaxThreads, "threads={} must be in [1, {}]", n, kMaxThreads);
  std::lock_guard<std::mutex> lk(g_pool_mu);
  if (pool().size() == n) return;
  const int before = pool().size();
  try {
    pool().resize(n);
  } catch (const std::system_error& e) {
    pool().resize(before);
    fail("threads={}: cannot start that many worker threads: {}", n, e.what());
  }
}

void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (n == 1 || tl_in_pool_task || pool().size() == 1) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> lk(g_pool_mu);  // one parallel region at a time
  set_canonical_fp_state();
  pool().run(n, fn);
}

void parallel_for_grain(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(num_threads(), n / grain));
  if (chunks == 1) {
    fn(0, n);
    return;
  }
  parallel_for(chunks, [&](int64_t cb, int64_t ce) { fn(n * cb / chunks, n * ce / chunks); });
}

}  // namespace titan
