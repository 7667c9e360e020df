// Parameter initialisation shared by every module's init_weights (TorchTitan's
// per-module init_weights, survey §4). A module type says what role each of its
// weights plays (an input projection, a residual output, a token embedding, ...);
// the scheme maps roles to standard deviations. Draws come from Philox keyed by
// (seed, the parameter's index in the root's named_parameters order), so the values
// are deterministic, independent of thread count and of the order modules run in.
#pragma once
#include <cstdint>
#include <unordered_map>

#include "titan/core/tensor.h"

namespace titan::nn {

// torchtitan_llama: TorchTitan's Llama 3 (depth_init): in-projections normal(0.02);
// residual outputs and the SwiGLU up projection 0.02/sqrt(2 (layer_id + 1)); token
// embedding normal(1) (tied: the LM head's D^-0.5, cut at ±3σ); LM head
// trunc_normal(D^-0.5, ±3σ).
// gpt2: GPT-2 / nanoGPT (model.py _init_weights): normal(0.02) for every matrix and the
// embedding, residual outputs 0.02/sqrt(2 L).
enum class InitStyle { torchtitan_llama, gpt2 };

// What a weight is, for the scheme's choice of std.
enum class InitRole {
  in_proj,       // wq, wk, wv, w1, router gate, ...
  out_proj,      // wo, w2: writes into the residual stream
  up_proj,       // SwiGLU w3
  embedding,     // the token embedding
  lm_head,       // an untied output projection
};

struct InitContext {
  uint64_t seed = 0;
  InitStyle style = InitStyle::torchtitan_llama;
  int64_t num_layers = 1;    // L
  int64_t hidden_size = 1;   // D
  bool tied_embeddings = false;
  // Parameter (by TensorImpl) -> Philox stream: its 1-based index in the root's
  // named_parameters order (number_parameters).
  std::unordered_map<const void*, uint64_t> streams;

  // A context whose streams number `root`'s parameters.
  template <class M>
  void number_parameters(const M& root) {
    uint64_t s = 0;
    for (auto& [name, t] : root.named_parameters()) streams[t.unsafe_impl()] = ++s;
  }

  // Fills `w` for its role in layer `layer_id` (-1 outside the layers). Throws
  // titan::Error if `w` is not a numbered parameter.
  void init(Tensor& w, InitRole role, int layer_id) const;
  // Normal(0, std) cut to ±trunc·std by rejection (trunc <= 0: no cut) from the
  // parameter's Philox stream: element i tries counters (i, attempt).
  void normal(Tensor& w, double std, double trunc = 0.0) const;
  // Constant fill (norm weights 1, biases and buffers 0); no random draws.
  static void constant(Tensor& w, double value);
};

}  // namespace titan::nn
