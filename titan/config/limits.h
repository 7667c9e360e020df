// Stated size limits of a model config (job config [model] and HF config.json),
// checked before anything is allocated. Each is far above every published model
// (the largest have ~128 layers, hidden size 16384-18432, 128 heads, head_dim 256,
// FFN width 53248, vocabularies of ~260k) and low enough that the products of the
// sizes cannot overflow 64 bits. docs/reliability/limits.md lists them.
#pragma once
#include <cstdint>

namespace titan::config {

inline constexpr int64_t kMaxLayers = 4096;
inline constexpr int64_t kMaxHiddenSize = 1 << 16;
inline constexpr int64_t kMaxHeads = 1 << 12;          // attention and key/value heads
inline constexpr int64_t kMaxHeadDim = 1 << 12;
inline constexpr int64_t kMaxIntermediateSize = 1 << 20;
inline constexpr int64_t kMaxVocabSize = 1 << 24;
inline constexpr int64_t kMaxPositions = int64_t{1} << 24;  // context length

}  // namespace titan::config
