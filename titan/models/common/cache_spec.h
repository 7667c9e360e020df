// What the generator caches, declared by the model per layer (DESIGN.md §7), and the
// cache the engine allocates from that declaration.
//
// A layer declares paged tensors: each holds `block_shape` floats per KV block of B
// tokens, allocated as (num_blocks, block_shape...) and addressed through the
// sequence's block table (paged K/V today; an MLA latent and its RoPE key, DSA indexer
// keys use the same form). It may also declare per-sequence state slots (a recurrent
// mixer's conv tail and state), allocated as (num_slots, slot_shape...). Block
// accounting, prefix caching and preemption work on blocks, whatever they hold.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "titan/core/tensor.h"
#include "titan/kernels/cpu/attention.h"

namespace titan::models {

// One cached tensor of a layer: a name for messages ("k", "v", "latent", ...) and the
// shape of one block (paged) or one sequence slot (state), in f32 elements.
struct CacheTensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel() const;
};

// A layer's cache. Both lists empty: the layer caches nothing.
struct LayerCacheSpec {
  std::vector<CacheTensorSpec> paged;  // per KV block of B tokens
  std::vector<CacheTensorSpec> state;  // per sequence slot
  // f32 bytes one KV block takes in this layer.
  int64_t bytes_per_block() const;
  bool operator==(const LayerCacheSpec&) const;
};

// The tensors of one layer, in the order of its LayerCacheSpec:
//   paged[i] (num_blocks, spec.paged[i].shape...), state[i] (num_slots, spec.state[i].shape...).
struct LayerCache {
  std::vector<Tensor> paged;
  std::vector<Tensor> state;
};

// The generator's cache pool: one LayerCache per layer.
struct ModelCache {
  std::vector<LayerCache> layers;
  int block_size = kernels::cpu::kKvBlockSize;
  int64_t num_blocks = 0;
  int64_t num_slots = 0;
};
using PagedKVCache = ModelCache;

// f32 bytes one KV block takes over all layers.
int64_t cache_bytes_per_block(const std::vector<LayerCacheSpec>& spec);

// Allocates (uninitialised) the tensors `spec` declares: num_blocks blocks of
// block_size tokens and num_slots sequence slots. Throws titan::Error on a
// negative count or an empty shape.
ModelCache allocate_cache(const std::vector<LayerCacheSpec>& spec, int64_t num_blocks, int block_size,
                          int64_t num_slots = 0);

}  // namespace titan::models
