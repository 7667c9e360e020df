// Causal attention over packed variable-length sequences (the trainer's path),
// differentiable, fp32, on the flash-style kernels of titan/kernels/cpu/attention.h
// (FlashAttention-2 forward/backward with the saved logsumexp; keys visited in
// fixed KV blocks in ascending order with an online softmax, so a query's output has
// the same bits here and on the generator's paged-cache path). Never materialises
// (T, T) scores. The composed twin (titan::composed::...) builds the same attention
// from matmul / softmax / where per sequence: the reference in tests.
//
// Errors (titan::Error naming op and argument): q/k/v not contiguous f32 of shapes
// (T, H, Dh), (T, Hkv, Dh), (T, Hkv, Dh); H % Hkv != 0; Dh not a multiple of 8 in
// [8, 256]; cu_seqlens not an i32/i64 (S + 1) tensor going from 0 to T without
// decreasing; sinks not f32 (H); bad window/chunk/softcap/scale.
#pragma once
#include "titan/core/tensor.h"
#include "titan/kernels/cpu/attention.h"

namespace titan {

struct AttentionOptions {
  double scale = 0.0;    // scores = scale · q·k; 0 means 1/sqrt(Dh)
  int window = 0;        // sliding window W: key j visible iff p − W < j <= p; 0 = off
  int chunk = 0;         // chunked local attention C (Llama 4): j visible iff j <= p and
                         // floor(j / C) == floor(p / C); 0 = off
  double softcap = 0.0;  // s = softcap · tanh(s / softcap) before masking (Gemma 2); 0 = off
  Tensor sinks;          // (H) f32 learned sink logit per query head (gpt-oss), or undefined
  int block_size = kernels::cpu::kKvBlockSize;  // KV block size B (multiple of 16, <= 256)
};

// out (T, H, Dh). Sequence s is tokens [cu_seqlens[s], cu_seqlens[s+1]); a token's
// position is its index within its sequence; no attention across sequences. GQA/MQA:
// query head h reads KV head h / (H / Hkv). Gradients to q, k, v and sinks.
Tensor scaled_dot_product_attention_varlen(const Tensor& q, const Tensor& k, const Tensor& v,
                                           const Tensor& cu_seqlens,
                                           const AttentionOptions& opts = {});

namespace composed {
Tensor scaled_dot_product_attention_varlen(const Tensor& q, const Tensor& k, const Tensor& v,
                                           const Tensor& cu_seqlens,
                                           const AttentionOptions& opts = {});
}  // namespace composed

}  // namespace titan
