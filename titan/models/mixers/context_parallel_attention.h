// The hook through which context parallelism (titan/distributed/context_parallel.h)
// takes over the gqa mixer's attention. While a ContextParallelScope is open on a
// thread, the trainer-path batches run there hold one cp rank's share of a longer packed
// batch (tokens with their global positions; cu_seqlens of the whole batch), and
// Attention::forward calls the scope's attention() instead of
// scaled_dot_product_attention_varlen. The trainer opens the scope around a
// microbatch's forward and its backward (activation checkpointing recomputes the
// attention during the backward).
#pragma once
#include "titan/core/tensor.h"

namespace titan {
struct AttentionOptions;  // titan/ops/attention.h
}

namespace titan::models {

class ContextParallelAttention {
 public:
  virtual ~ContextParallelAttention() = default;
  // q (Tl, H, Dh), k, v (Tl, Hkv, Dh) contiguous f32 of this rank's Tl tokens -> out
  // (Tl, H, Dh), each query attending to the keys of the whole batch as one rank would.
  // Collective over the cp ranks (forward and backward). Differentiable.
  virtual Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& opts) const = 0;
};

// The attention of the innermost open scope on this thread, or null.
const ContextParallelAttention* context_parallel_attention();

class ContextParallelScope {
 public:
  explicit ContextParallelScope(const ContextParallelAttention* cp);
  ~ContextParallelScope();
  ContextParallelScope(const ContextParallelScope&) = delete;
  ContextParallelScope& operator=(const ContextParallelScope&) = delete;

 private:
  const ContextParallelAttention* prev_;
};

}  // namespace titan::models
