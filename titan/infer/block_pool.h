// The paged KV cache's block manager (vLLM's BlockPool / KVCacheManager, CPU edition).
//
// A pool of num_blocks fixed-size blocks (B tokens each) with a reference count per
// block and a free list in LRU order. A block whose K/V has been fully computed can be
// registered in the prefix table under the hash of the whole token prefix up to its
// end (block_hash chains parent hash + the block's tokens + a salt); a later sequence
// with the same prefix takes the block instead of recomputing it (prefix caching; the
// n samples of one prompt share its prompt blocks the same way). Only FULL blocks are
// ever shared, so a shared block is never written again (no copy-on-write).
//
// A freed block (refcount 0) keeps its K/V and its prefix-table entry while it sits in
// the free list; allocate() takes blocks from the head (least recently freed first)
// and evicts their table entries. num_free() counts these cached free blocks too, so
// after every request has finished num_free() == num_blocks().
//
// Lookups compare the stored parent hash and tokens, so a 64-bit hash collision within
// one chain level cannot hand out a wrong block.
#pragma once
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace titan::infer {

// Hash of a full block: (parent hash, salt, the block's B tokens). parent = 0 for the
// first block of a sequence. Deterministic across runs.
uint64_t block_hash(uint64_t parent, uint64_t salt, std::span<const int32_t> tokens);

class BlockPool {
 public:
  // Throws titan::Error for num_blocks < 0 or block_size < 1.
  BlockPool(int64_t num_blocks, int block_size);

  int64_t num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  // Blocks with refcount 0 (including those still holding cached K/V).
  int64_t num_free() const { return num_free_; }
  int64_t num_cached() const { return static_cast<int64_t>(table_.size()); }
  int32_t ref_count(int32_t block) const { return ref_[block]; }

  // Appends n blocks (refcount 1) to out. Returns false and takes nothing when fewer
  // than n are free.
  bool allocate(int64_t n, std::vector<int32_t>& out);
  // Drops one reference of each block, last block first (so a sequence's tail blocks
  // are the first to be evicted). Throws titan::Error on a double free.
  void release(std::span<const int32_t> blocks);

  // The registered block for (hash, parent, tokens), or -1.
  int32_t lookup(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens) const;
  // Takes a reference on a looked-up block (refcount 0 -> 1 leaves the free list).
  void acquire(int32_t block);
  // Registers a fully computed block under hash. No-op when the hash is already
  // registered (another block holds the same prefix) or the block already has one.
  void register_block(int32_t block, uint64_t hash, uint64_t parent, std::span<const int32_t> tokens);

  // Prefix-cache counters: blocks looked up / found since construction.
  int64_t queries() const { return queries_; }
  int64_t hits() const { return hits_; }
  void count_lookup(bool hit) const {
    ++queries_;
    hits_ += hit;
  }

 private:
  void unlink(int32_t b);
  void push_back(int32_t b);

  int64_t num_blocks_;
  int block_size_;
  int64_t num_free_ = 0;
  std::vector<int32_t> ref_;
  std::vector<int32_t> prev_, next_;  // free list; index num_blocks_ is the sentinel
  std::vector<uint8_t> in_free_;
  std::vector<uint64_t> hash_, parent_;
  std::vector<uint8_t> hashed_;
  std::vector<int32_t> tokens_;  // (num_blocks, B) tokens of registered blocks
  std::unordered_map<uint64_t, int32_t> table_;
  mutable int64_t queries_ = 0, hits_ = 0;
};

}  // namespace titan::infer
