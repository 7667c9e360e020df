// A flat open-addressing hash index from byte strings to int32 indices, for the
// tokenizer's hot lookups (vocabulary bytes -> id, pre-token cache). The strings
// live elsewhere (a vector or an arena); the index stores only a 32-bit hash and
// the entry index per slot, so a lookup touches one slot and one string.
#pragma once
#include <cstdint>
#include <cstring>
#include <functional>
#include <string_view>
#include <vector>

namespace titan::data {

// 32-bit hash of a byte string (std::hash of std::string_view, folded).
inline uint32_t hash_bytes(std::string_view s) {
  const uint64_t h = std::hash<std::string_view>{}(s);
  return uint32_t(h ^ (h >> 32));
}

class FlatIndex {
 public:
  // Index of the entry whose key (key_of(index) -> std::string_view) equals key,
  // or -1. h = hash_bytes(key).
  template <class KeyOf>
  int32_t find(std::string_view key, uint32_t h, const KeyOf& key_of) const {
    if (slots_.empty()) return -1;
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const uint64_t s = slots_[i];
      if (s == 0) return -1;
      if (uint32_t(s >> 32) == h) {
        const int32_t idx = int32_t(uint32_t(s) - 1);
        const std::string_view k = key_of(idx);
        if (k.size() == key.size() && std::memcmp(k.data(), key.data(), k.size()) == 0) return idx;
      }
    }
  }
  // Adds entry index with hash h (the caller checked that its key is absent).
  void insert(uint32_t h, int32_t index) {
    if (2 * (count_ + 1) > slots_.size()) grow();
    place(h, index);
    ++count_;
  }
  void reserve(size_t n) {
    while (slots_.size() < 2 * n) grow();
  }
  size_t size() const { return count_; }

 private:
  void place(uint32_t h, int32_t index) {
    size_t i = h & mask_;
    while (slots_[i] != 0) i = (i + 1) & mask_;
    slots_[i] = (uint64_t(h) << 32) | uint32_t(index + 1);
  }
  void grow() {
    std::vector<uint64_t> old = std::move(slots_);
    slots_.assign(old.empty() ? 64 : old.size() * 2, 0);
    mask_ = slots_.size() - 1;
    for (uint64_t s : old)
      if (s != 0) place(uint32_t(s >> 32), int32_t(uint32_t(s) - 1));
  }

  std::vector<uint64_t> slots_;  // (hash << 32) | (index + 1); 0 = empty
  size_t mask_ = 0;
  size_t count_ = 0;
};

}  // namespace titan::data
