#include "titan/infer/block_pool.h"

#include <algorithm>

#include "titan/core/error.h"

namespace titan::infer {

namespace {
inline uint64_t mix64(uint64_t x) {  // splitmix64 finaliser
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}
}  // namespace

uint64_t block_hash(uint64_t parent, uint64_t salt, std::span<const int32_t> tokens) {
  uint64_t h = mix64(parent ^ 0x9E3779B97F4A7C15ull) ^ mix64(salt + 0x632BE59BD9B4E019ull);
  for (int32_t t : tokens) h = mix64(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(t)) + 0x9E3779B97F4A7C15ull));
  return h == 0 ? 1 : h;  // 0 is the "no parent" value
}

BlockPool::BlockPool(int64_t num_blocks, int block_size) : num_blocks_(num_blocks), block_size_(block_size) {
  TITAN_CHECK(num_blocks >= 0 && num_blocks < (int64_t{1} << 31),
              "BlockPool: num_blocks must be in [0, 2^31), got {}", num_blocks);
  TITAN_CHECK(block_size >= 1, "BlockPool: block_size must be >= 1, got {}", block_size);
  const size_t n = static_cast<size_t>(num_blocks);
  ref_.assign(n, 0);
  prev_.assign(n + 1, 0);
  next_.assign(n + 1, 0);
  in_free_.assign(n, 0);
  hash_.assign(n, 0);
  parent_.assign(n, 0);
  hashed_.assign(n, 0);
  tokens_.assign(n * static_cast<size_t>(block_size), 0);
  const int32_t s = static_cast<int32_t>(num_blocks);  // sentinel
  prev_[s] = next_[s] = s;
  for (int32_t b = 0; b < s; ++b) push_back(b);
}

void BlockPool::unlink(int32_t b) {
  next_[prev_[b]] = next_[b];
  prev_[next_[b]] = prev_[b];
  in_free_[b] = 0;
  --num_free_;
}

void BlockPool::push_back(int32_t b) {
  const int32_t s = static_cast<int32_t>(num_blocks_);
  prev_[b] = prev_[s];
  next_[b] = s;
  next_[prev_[s]] = b;
  prev_[s] = b;
  in_free_[b] = 1;
  ++num_free_;
}

bool BlockPool::allocate(int64_t n, std::vector<int32_t>& out) {
  if (n <= 0) return true;
  if (n > num_free_) return false;
  const int32_t s = static_cast<int32_t>(num_blocks_);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t b = next_[s];
    unlink(b);
    if (hashed_[b]) {  // evict its cached K/V from the prefix table
      auto it = table_.find(hash_[b]);
      if (it != table_.end() && it->second == b) table_.erase(it);
      hashed_[b] = 0;
    }
    ref_[b] = 1;
    out.push_back(b);
  }
  return true;
}

void BlockPool::release(std::span<const int32_t> blocks) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    const int32_t b = *it;
    TITAN_CHECK(b >= 0 && b < num_blocks_, "BlockPool::release: block {} is out of range [0, {})", b, num_blocks_);
    TITAN_CHECK(ref_[b] > 0, "BlockPool::release: block {} is already free", b);
    if (--ref_[b] == 0) push_back(b);
  }
}

int32_t BlockPool::lookup(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens) const {
  auto it = table_.find(hash);
  if (it == table_.end()) return -1;
  const int32_t b = it->second;
  if (parent_[b] != parent || static_cast<int64_t>(tokens.size()) != block_size_ ||
      !std::equal(tokens.begin(), tokens.end(), tokens_.begin() + static_cast<int64_t>(b) * block_size_))
    return -1;
  return b;
}

void BlockPool::acquire(int32_t b) {
  TITAN_CHECK(b >= 0 && b < num_blocks_, "BlockPool::acquire: block {} is out of range [0, {})", b, num_blocks_);
  if (ref_[b]++ == 0) unlink(b);
}

void BlockPool::register_block(int32_t b, uint64_t hash, uint64_t parent, std::span<const int32_t> tokens) {
  TITAN_CHECK(b >= 0 && b < num_blocks_ && ref_[b] > 0,
              "BlockPool::register_block: block {} is not an allocated block", b);
  TITAN_CHECK(static_cast<int64_t>(tokens.size()) == block_size_,
              "BlockPool::register_block: {} tokens, expected a full block of {}", tokens.size(), block_size_);
  if (hashed_[b] || table_.count(hash)) return;
  table_.emplace(hash, b);
  hashed_[b] = 1;
  hash_[b] = hash;
  parent_[b] = parent;
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + static_cast<int64_t>(b) * block_size_);
}

}  // namespace titan::infer
