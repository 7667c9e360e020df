// The generator's recurrent-state slots (DESIGN.md §7, model-declared cache): rows of the
// state tensors that a model's linear-attention layers declare in cache_spec (a conv tail
// and the delta rule's chunk state per layer, fixed size, independent of the context).
//
//   rows [0, num_seq_slots):                one per running sequence, held from admission
//                                           to finish / preemption;
//   rows [num_seq_slots, + num_snapshots):  prefix-cache snapshots: the state of a token
//                                           prefix that ends at a KV block boundary, keyed
//                                           by that block's prefix hash (block_hash), so a
//                                           later sequence whose K/V blocks hit the prefix
//                                           table resumes from the exact state. Reused in
//                                           least-recently-used order.
// A snapshot is found only by a hash whose block the BlockPool's lookup has matched
// (tokens and parent compared), so it always belongs to the tokens it is used for.
#pragma once
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

namespace titan::infer {

class StatePool {
 public:
  StatePool() = default;
  // Throws titan::Error for negative counts.
  StatePool(int64_t num_seq_slots, int64_t num_snapshots);

  bool enabled() const { return num_seq_ > 0; }
  int64_t num_seq_slots() const { return num_seq_; }
  int64_t num_snapshots() const { return num_snap_; }
  int64_t num_rows() const { return num_seq_ + num_snap_; }
  int64_t num_free_seq_slots() const { return static_cast<int64_t>(free_.size()); }

  // A free sequence row (lowest first), or -1 when all are held.
  int32_t acquire();
  // Returns a sequence row. Throws titan::Error on a row that is not held.
  void release(int32_t row);

  // The snapshot row holding the state after the prefix `hash`, or -1; a hit becomes
  // the most recently used.
  int32_t find(uint64_t hash);
  // A snapshot row to write (the least recently used; its old prefix is forgotten).
  int32_t reserve();
  // Registers a written snapshot row under hash (replacing an older row of that hash).
  void publish(int32_t row, uint64_t hash);

 private:
  void touch(int32_t row);

  int64_t num_seq_ = 0, num_snap_ = 0;
  std::vector<int32_t> free_;  // free sequence rows, highest first (pop_back = lowest)
  std::vector<uint8_t> held_;
  std::list<int32_t> lru_;     // snapshot rows, least recently used first
  std::vector<std::list<int32_t>::iterator> where_;
  std::unordered_map<uint64_t, int32_t> by_hash_;
  std::vector<uint64_t> hash_of_;
  std::vector<uint8_t> keyed_;
};

}  // namespace titan::infer
