#include "titan/data/bpe_merge.h"

#include <algorithm>
#include <bit>
#include <queue>

namespace titan::data {

void MergeTable::reserve(size_t n) {
  size_t cap = 16;
  while (cap < 2 * n) cap *= 2;
  if (cap <= keys_.size()) return;
  std::vector<uint64_t> old_keys = std::move(keys_), old_vals = std::move(vals_);
  keys_.assign(cap, kNone);
  vals_.assign(cap, kNone);
  mask_ = cap - 1;
  shift_ = 64 - std::countr_zero(cap);
  size_ = 0;
  for (size_t i = 0; i < old_keys.size(); ++i) {
    if (old_keys[i] == kNone) continue;
    for (uint64_t j = hash(old_keys[i]);; j = (j + 1) & mask_) {
      if (keys_[j] == kNone) {
        keys_[j] = old_keys[i];
        vals_[j] = old_vals[i];
        ++size_;
        break;
      }
    }
  }
}

void MergeTable::grow() { reserve(std::max<size_t>(16, size_ + 1) * 2); }

bool MergeTable::add(int32_t a, int32_t b, uint32_t rank, int32_t merged) {
  if (2 * (size_ + 1) > keys_.size()) grow();
  const uint64_t key = pack(a, b);
  for (uint64_t i = hash(key);; i = (i + 1) & mask_) {
    if (keys_[i] == key) return false;
    if (keys_[i] == kNone) {
      keys_[i] = key;
      vals_[i] = (uint64_t(rank) << 32) | uint32_t(merged);
      ++size_;
      return true;
    }
  }
}

namespace {

constexpr size_t kScanMax = 48;  // words up to this many symbols use the scan

void merge_scan(const MergeTable& merges, std::vector<int32_t>& s) {
  size_t n = s.size();
  // pair[i]: value of the merge of (s[i], s[i+1]).
  uint64_t pair[kScanMax];
  for (size_t i = 0; i + 1 < n; ++i) pair[i] = merges.find(s[i], s[i + 1]);
  while (n > 1) {
    size_t best = 0;
    uint64_t best_v = pair[0];
    for (size_t i = 1; i + 1 < n; ++i) {
      if (pair[i] < best_v) {
        best_v = pair[i];
        best = i;
      }
    }
    if (best_v == MergeTable::kNone) break;
    s[best] = static_cast<int32_t>(uint32_t(best_v));
    for (size_t i = best + 1; i + 1 < n; ++i) s[i] = s[i + 1];
    for (size_t i = best + 1; i + 2 < n; ++i) pair[i] = pair[i + 1];
    --n;
    if (best > 0) pair[best - 1] = merges.find(s[best - 1], s[best]);
    if (best + 1 < n) pair[best] = merges.find(s[best], s[best + 1]);
  }
  s.resize(n);
}

void merge_heap(const MergeTable& merges, std::vector<int32_t>& s) {
  const int32_t n = static_cast<int32_t>(s.size());
  std::vector<int32_t> prev(n), next(n);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Entry {
    uint64_t value;
    int32_t pos;
    bool operator>(const Entry& o) const {
      return value != o.value ? value > o.value : pos > o.pos;
    }
  };
  std::vector<Entry> storage;
  storage.reserve(n);
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap(std::greater<Entry>{},
                                                                          std::move(storage));
  for (int32_t i = 0; i + 1 < n; ++i) {
    const uint64_t v = merges.find(s[i], s[i + 1]);
    if (v != MergeTable::kNone) heap.push({v, i});
  }
  std::vector<char> alive(n, 1);
  while (!heap.empty()) {
    const Entry e = heap.top();
    heap.pop();
    const int32_t i = e.pos;
    if (!alive[i] || next[i] < 0) continue;
    const int32_t j = next[i];
    if (merges.find(s[i], s[j]) != e.value) continue;  // stale entry
    s[i] = static_cast<int32_t>(uint32_t(e.value));
    alive[j] = 0;
    next[i] = next[j];
    if (next[j] >= 0) prev[next[j]] = i;
    if (prev[i] >= 0) {
      const uint64_t v = merges.find(s[prev[i]], s[i]);
      if (v != MergeTable::kNone) heap.push({v, prev[i]});
    }
    if (next[i] >= 0) {
      const uint64_t v = merges.find(s[i], s[next[i]]);
      if (v != MergeTable::kNone) heap.push({v, i});
    }
  }
  int32_t w = 0;
  for (int32_t i = 0; i < n; ++i)
    if (alive[i]) s[w++] = s[i];
  s.resize(w);
}

}  // namespace

void bpe_merge_word(const MergeTable& merges, std::vector<int32_t>& symbols, int force) {
  if (symbols.size() < 2) return;
  const bool scan = force == 1 ? true : force == 2 ? false : symbols.size() <= kScanMax;
  if (scan && symbols.size() <= kScanMax)
    merge_scan(merges, symbols);
  else
    merge_heap(merges, symbols);
}

}  // namespace titan::data
