// The BPE merge loop: a pair -> (rank, merged id) table and the function that
// merges one pre-token. Same result as Hugging Face tokenizers' Word::merge_all
// (models/bpe/word.rs): repeatedly apply the lowest-rank adjacent pair, the
// leftmost one on ties, until no adjacent pair has a merge.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace titan::data {

// Open-addressing hash map (linear probing) from a pair of ids (a, b) to the rank
// of the merge a+b and the id of the merged token. Built once, read-only after.
class MergeTable {
 public:
  static constexpr uint64_t kNone = ~uint64_t{0};

  // Reserves room for n merges (call before add()).
  void reserve(size_t n);
  // Records merge (a, b) -> merged with the given rank. Returns false if (a, b)
  // was already present (the first rank is kept, as in HF).
  bool add(int32_t a, int32_t b, uint32_t rank, int32_t merged);
  // (rank << 32) | merged for the pair, or kNone. Comparing two values orders
  // by rank first.
  uint64_t find(int32_t a, int32_t b) const {
    if (mask_ == 0) return kNone;
    const uint64_t key = pack(a, b);
    for (uint64_t i = hash(key);; i = (i + 1) & mask_) {
      const uint64_t k = keys_[i];
      if (k == key) return vals_[i];
      if (k == kNone) return kNone;
    }
  }
  size_t size() const { return size_; }

 private:
  static uint64_t pack(int32_t a, int32_t b) {
    return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  }
  uint64_t hash(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift_; }
  void grow();

  std::vector<uint64_t> keys_, vals_;
  uint64_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
};

// Merges the symbols of one word in place: symbols (n) holds the ids of its
// initial units (for byte-level BPE, one id per byte) and on return the ids of its
// tokens. Words longer than a small threshold use a heap over a linked list
// (O(n log n)); shorter ones a linear scan per merge (O(n^2), faster when small).
// force: 0 = pick by length, 1 = always the scan, 2 = always the heap (tests).
void bpe_merge_word(const MergeTable& merges, std::vector<int32_t>& symbols, int force = 0);

}  // namespace titan::data
