#include "titan/models/common/vocab_shard.h"

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "titan/core/error.h"
#include "titan/models/common/layers.h"

namespace titan::models {

namespace {
std::mutex g_mu;
std::unordered_map<const Embedding*, VocabShard> g_shards;
std::atomic<size_t> g_count{0};  // fast path: no shard anywhere
}  // namespace

void set_vocab_shard(const Embedding& e, std::optional<VocabShard> shard) {
  if (shard) {
    const int64_t rows = e.weight.size(0);
    TITAN_CHECK(shard->vocab_start >= 0 && shard->vocab_start + rows <= shard->vocab_size,
                "set_vocab_shard: rows [{}, {}) do not fit in a vocabulary of {}", shard->vocab_start,
                shard->vocab_start + rows, shard->vocab_size);
  }
  std::lock_guard<std::mutex> lk(g_mu);
  if (shard)
    g_shards[&e] = *shard;
  else
    g_shards.erase(&e);
  g_count.store(g_shards.size());
}

std::optional<VocabShard> vocab_shard(const Embedding& e) {
  if (g_count.load() == 0) return std::nullopt;
  std::lock_guard<std::mutex> lk(g_mu);
  auto it = g_shards.find(&e);
  if (it == g_shards.end()) return std::nullopt;
  return it->second;
}

}  // namespace titan::models
