#include "titan/models/common/cache_spec.h"

namespace titan::models {

int64_t CacheTensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t LayerCacheSpec::bytes_per_block() const {
  int64_t n = 0;
  for (const auto& t : paged) n += t.numel();
  return n * static_cast<int64_t>(sizeof(float));
}

bool LayerCacheSpec::operator==(const LayerCacheSpec& o) const {
  auto same = [](const std::vector<CacheTensorSpec>& a, const std::vector<CacheTensorSpec>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i].name != b[i].name || a[i].shape != b[i].shape) return false;
    return true;
  };
  return same(paged, o.paged) && same(state, o.state);
}

int64_t cache_bytes_per_block(const std::vector<LayerCacheSpec>& spec) {
  int64_t n = 0;
  for (const auto& l : spec) n += l.bytes_per_block();
  return n;
}

ModelCache allocate_cache(const std::vector<LayerCacheSpec>& spec, int64_t num_blocks, int block_size,
                          int64_t num_slots) {
  TITAN_CHECK(num_blocks >= 0, "allocate_cache: num_blocks must be >= 0, got {}", num_blocks);
  TITAN_CHECK(block_size > 0, "allocate_cache: block_size must be > 0, got {}", block_size);
  ModelCache c;
  c.block_size = block_size;
  c.num_blocks = num_blocks;
  c.num_slots = num_slots;
  for (size_t l = 0; l < spec.size(); ++l) {
    LayerCache lc;
    for (const auto& t : spec[l].paged) {
      TITAN_CHECK(!t.shape.empty() && t.numel() > 0, "allocate_cache: layer {} tensor '{}' has an empty shape", l,
                  t.name);
      Shape s{num_blocks};
      for (int64_t d : t.shape) s.push_back(d);
      lc.paged.push_back(Tensor::empty(s));
    }
    for (const auto& t : spec[l].state) {
      TITAN_CHECK(num_slots > 0, "allocate_cache: layer {} declares state '{}' but num_slots is 0", l, t.name);
      Shape s{num_slots};
      for (int64_t d : t.shape) s.push_back(d);
      lc.state.push_back(Tensor::zeros(s));
    }
    c.layers.push_back(std::move(lc));
  }
  return c;
}

}  // namespace titan::models
