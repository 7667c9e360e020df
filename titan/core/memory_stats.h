// Bytes held by tensor storage (titan::Storage allocations made by titan; wrapped
// external memory such as mmapped checkpoints is not counted). Process-wide,
// thread-safe counters for memory reports (the trainer's per-step working memory,
// activation checkpointing benchmarks).
#pragma once
#include <cstdint>

namespace titan {

// Bytes currently allocated by live Storage objects (64-byte rounded sizes).
int64_t storage_bytes_live();
// Highest storage_bytes_live() since the start or the last reset_storage_peak().
int64_t storage_bytes_peak();
// Sets the peak to the current live bytes (start of a measured region).
void reset_storage_peak();

}  // namespace titan
