// Loader for llama2.c's legacy (version 0) model.bin, as read by run.c
// (https://github.com/karpathy/llama2.c, run.c read_checkpoint/memory_map_weights,
// written by export.py legacy_export):
//   7 x int32 header: dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size
//     (negative: the classifier is stored separately, |vocab_size| tokens), seq_len
//   float32 weights, in order (L layers, D = dim, F = hidden_dim, Dkv = n_kv_heads *
//   head_size, head_size = D / n_heads):
//     token_embedding (V, D), rms_att (L, D), wq (L, D, D), wk (L, Dkv, D),
//     wv (L, Dkv, D), wo (L, D, D), rms_ffn (L, D), w1 (L, F, D), w2 (L, D, F),
//     w3 (L, F, D), rms_final (D), freq_cis_real (seq_len, head_size/2),
//     freq_cis_imag (seq_len, head_size/2), then wcls (V, D) if unshared.
// The sizes must consume the file exactly.
//
// RoPE convention. run.c rotates interleaved pairs (x[2i], x[2i+1]) of each head
// by angle pos * 10000^(-2i/head_size); HF Llama (and titan) rotate halves
// (x[i], x[i + head_size/2]) by the same angle. With the rows of wq / wk permuted
// inside each head by
//   new row  t * head_size/2 + i  =  old row  2 * i + t      (t in {0, 1}, i < head_size/2)
// which is exactly transformers' convert_llama_weights_to_hf.py
//   permute(w, n_heads, dim1, dim2) =
//     w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)
// (n_heads for wq, n_kv_heads for wk), the projected q/k are the same numbers in
// the rotate-half order, rotate-half RoPE rotates the same pairs by the same
// angles, and the attention scores q·k are unchanged (tests/checkpoint/llama2c_test
// checks this against an independent numpy computation).
#pragma once
#include <cstdint>
#include <string>

#include "titan/checkpoint/hf_config.h"
#include "titan/checkpoint/safetensors.h"

namespace titan {

struct Llama2cConfig {
  int64_t dim = 0;         // D
  int64_t hidden_dim = 0;  // F
  int64_t n_layers = 0;    // L
  int64_t n_heads = 0;     // H
  int64_t n_kv_heads = 0;  // Hkv
  int64_t vocab_size = 0;  // V (always positive here)
  int64_t seq_len = 0;     // max tokens
  bool shared_classifier = true;  // header vocab_size > 0: lm_head = token_embedding
  int64_t head_size() const { return dim / n_heads; }
};

enum class Llama2cRope {
  rotate_half,  // wq/wk rows permuted for HF/titan rotate-half RoPE (default)
  interleaved,  // wq/wk exactly as stored (for run.c-style interleaved RoPE)
};

struct Llama2cModel {
  Llama2cConfig config;
  // HF Llama names, f32, contiguous: model.embed_tokens.weight (V, D),
  // model.layers.{i}.self_attn.{q,k,v,o}_proj.weight ((D|Dkv), D) / (D, D),
  // model.layers.{i}.mlp.gate_proj (=w1, (F, D)), .down_proj (=w2, (D, F)),
  // .up_proj (=w3, (F, D)), model.layers.{i}.input_layernorm.weight (=rms_att, (D)),
  // .post_attention_layernorm.weight (=rms_ffn, (D)), model.norm.weight (D),
  // lm_head.weight (V, D) only when the classifier is not shared.
  TensorMap weights;
  // The stored RoPE tables (seq_len, head_size/2): cos / sin of pos * 10000^(-2i/head_size).
  Tensor freq_cis_real, freq_cis_imag;
};

// Reads a legacy llama2.c checkpoint. Throws titan::Error "llama2.c <path>: ..." for
// a missing file, a file shorter than the header, a version-1/2 export (magic
// "ak42"), non-positive or inconsistent header values (D % H, H % Hkv, odd
// head_size), and a size that does not match the header (truncated or trailing
// bytes), stating the expected and the actual byte counts.
Llama2cModel load_llama2c(const std::string& path, Llama2cRope rope = Llama2cRope::rotate_half);

// Row permutation of a q/k projection (n_heads * head_size, in) from interleaved
// to rotate-half order (see above); permute_rotate_half_inverse undoes it. Any
// dtype; returns a new contiguous tensor. Throws if rows % (2 * n_heads) != 0.
Tensor permute_rotate_half(const Tensor& w, int64_t n_heads);
Tensor permute_rotate_half_inverse(const Tensor& w, int64_t n_heads);

// The equivalent HF Llama config: rope_theta 10000, rms_norm_eps 1e-5 (run.c),
// max_position_embeddings = seq_len, tie_word_embeddings = shared_classifier,
// bos 1, eos 2 (llama2.c's sentencepiece ids), torch_dtype float32.
HFConfig llama2c_to_hf_config(const Llama2cConfig& c);

}  // namespace titan
