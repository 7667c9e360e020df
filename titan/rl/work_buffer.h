// WorkBuffer: the bounded buffer between the rollout producer (generator) and the
// trainer in the asynchronous RL mode: it never lets a rollout be more than
// max_offpolicy_steps policy versions old.
//
// Each item carries the policy version that produced it. Invariants, under the mutex:
//  - size() <= capacity at every moment (put blocks while full);
//  - take(n, v) never returns an item with v - policy_version > max_offpolicy_steps:
//    such items are removed when take() looks at the buffer and counted in dropped();
//  - every item accepted by put() is, exactly once, returned by take(), dropped as
//    stale, or still held (items still held when the buffer is destroyed are discarded);
//  - items are returned in put order (FIFO).
// close() wakes every waiter: put() then returns false without storing its item, and
// take() returns whatever fresh items remain (possibly fewer than n, possibly none).
//
// Thread-safe: any number of producers and consumers (one mutex, two condition
// variables). Errors (titan::Error): capacity < 1, max_offpolicy_steps < 0, take with
// n < 1 or n > capacity (it could never be satisfied).
#pragma once
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>

#include "titan/core/error.h"

namespace titan::rl {

template <class T>
class WorkBuffer {
 public:
  WorkBuffer(int64_t capacity, int64_t max_offpolicy_steps)
      : capacity_(capacity), max_lag_(max_offpolicy_steps) {
    TITAN_CHECK(capacity >= 1, "WorkBuffer: argument 'capacity' must be >= 1, got {}", capacity);
    TITAN_CHECK(max_offpolicy_steps >= 0,
                "WorkBuffer: argument 'max_offpolicy_steps' must be >= 0, got {}",
                max_offpolicy_steps);
  }
  WorkBuffer(const WorkBuffer&) = delete;
  WorkBuffer& operator=(const WorkBuffer&) = delete;

  // Producer: blocks while the buffer holds `capacity` items; returns false (item not
  // stored) if the buffer is or becomes closed.
  bool put(T item, int64_t policy_version) {
    std::unique_lock lk(mu_);
    not_full_.wait(lk, [&] { return closed_ || static_cast<int64_t>(q_.size()) < capacity_; });
    if (closed_) return false;
    q_.emplace_back(std::move(item), policy_version);
    high_water_ = std::max(high_water_, static_cast<int64_t>(q_.size()));
    not_empty_.notify_all();
    return true;
  }

  // Consumer at trainer policy version `trainer_version`: blocks until n fresh items are
  // held (or the buffer is closed: then returns the fresh items left, maybe fewer than n)
  // and returns them as (item, policy_version) in put order. Stale items (lag >
  // max_offpolicy_steps) are dropped first, freeing room for the producer.
  std::vector<std::pair<T, int64_t>> take(int64_t n, int64_t trainer_version) {
    TITAN_CHECK(n >= 1 && n <= capacity_,
                "WorkBuffer::take: argument 'n' must be in [1, capacity={}], got {}", capacity_, n);
    std::unique_lock lk(mu_);
    for (;;) {
      drop_stale(trainer_version);
      if (closed_ || static_cast<int64_t>(q_.size()) >= n) break;
      not_empty_.wait(lk);
    }
    const int64_t k = std::min<int64_t>(n, static_cast<int64_t>(q_.size()));
    std::vector<std::pair<T, int64_t>> out;
    out.reserve(k);
    for (int64_t i = 0; i < k; ++i) {
      out.push_back(std::move(q_.front()));
      q_.pop_front();
    }
    if (k > 0) not_full_.notify_all();
    return out;
  }

  // Wakes all waiters; later puts fail, takes return what is left without waiting.
  void close() {
    std::lock_guard lk(mu_);
    closed_ = true;
    not_full_.notify_all();
    not_empty_.notify_all();
  }

  bool closed() const {
    std::lock_guard lk(mu_);
    return closed_;
  }
  int64_t dropped() const {
    std::lock_guard lk(mu_);
    return dropped_;
  }
  int64_t size() const {
    std::lock_guard lk(mu_);
    return static_cast<int64_t>(q_.size());
  }
  // The largest size() ever reached (<= capacity by the invariant).
  int64_t high_water() const {
    std::lock_guard lk(mu_);
    return high_water_;
  }
  int64_t capacity() const { return capacity_; }
  int64_t max_offpolicy_steps() const { return max_lag_; }

 private:
  // Removes every item too old for trainer_version (anywhere in the queue). Needs mu_.
  void drop_stale(int64_t trainer_version) {
    const auto before = q_.size();
    std::erase_if(
        q_, [&](const std::pair<T, int64_t>& e) { return trainer_version - e.second > max_lag_; });
    const auto removed = static_cast<int64_t>(before - q_.size());
    if (removed > 0) {
      dropped_ += removed;
      not_full_.notify_all();
    }
  }

  const int64_t capacity_, max_lag_;
  mutable std::mutex mu_;
  std::condition_variable not_full_, not_empty_;
  std::deque<std::pair<T, int64_t>> q_;
  bool closed_ = false;
  int64_t dropped_ = 0, high_water_ = 0;
};

}  // namespace titan::rl
