#include "titan/infer/state_pool.h"

#include "titan/core/error.h"

namespace titan::infer {

StatePool::StatePool(int64_t num_seq_slots, int64_t num_snapshots) : num_seq_(num_seq_slots), num_snap_(num_snapshots) {
  TITAN_CHECK(num_seq_slots >= 0 && num_snapshots >= 0,
              "StatePool: slot counts must be >= 0, got {} sequence slots and {} snapshots", num_seq_slots,
              num_snapshots);
  held_.assign(static_cast<size_t>(num_seq_), 0);
  for (int64_t r = num_seq_ - 1; r >= 0; --r) free_.push_back(static_cast<int32_t>(r));
  where_.resize(static_cast<size_t>(num_snap_));
  hash_of_.assign(static_cast<size_t>(num_snap_), 0);
  keyed_.assign(static_cast<size_t>(num_snap_), 0);
  for (int64_t i = 0; i < num_snap_; ++i) where_[static_cast<size_t>(i)] = lru_.insert(lru_.end(), static_cast<int32_t>(num_seq_ + i));
}

int32_t StatePool::acquire() {
  if (free_.empty()) return -1;
  const int32_t r = free_.back();
  free_.pop_back();
  held_[static_cast<size_t>(r)] = 1;
  return r;
}

void StatePool::release(int32_t row) {
  TITAN_CHECK(row >= 0 && row < num_seq_ && held_[static_cast<size_t>(row)],
              "StatePool: release of sequence slot {} that is not held", row);
  held_[static_cast<size_t>(row)] = 0;
  free_.push_back(row);
}

void StatePool::touch(int32_t row) {
  auto& it = where_[static_cast<size_t>(row - num_seq_)];
  lru_.splice(lru_.end(), lru_, it);
}

int32_t StatePool::find(uint64_t hash) {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return -1;
  touch(it->second);
  return it->second;
}

int32_t StatePool::reserve() {
  TITAN_CHECK(num_snap_ > 0, "StatePool: no snapshot rows");
  const int32_t row = lru_.front();
  const size_t i = static_cast<size_t>(row - num_seq_);
  if (keyed_[i]) {
    by_hash_.erase(hash_of_[i]);
    keyed_[i] = 0;
  }
  touch(row);
  return row;
}

void StatePool::publish(int32_t row, uint64_t hash) {
  TITAN_CHECK(row >= num_seq_ && row < num_seq_ + num_snap_, "StatePool: {} is not a snapshot row", row);
  const size_t i = static_cast<size_t>(row - num_seq_);
  if (auto it = by_hash_.find(hash); it != by_hash_.end() && it->second != row)
    keyed_[static_cast<size_t>(it->second - num_seq_)] = 0;
  if (keyed_[i] && hash_of_[i] != hash) by_hash_.erase(hash_of_[i]);
  by_hash_[hash] = row;
  hash_of_[i] = hash;
  keyed_[i] = 1;
  touch(row);
}

}  // namespace titan::infer
