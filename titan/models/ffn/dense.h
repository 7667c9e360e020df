// The dense SwiGLU feed-forward (TorchTitan names w1/w2/w3).
#pragma once
#include "titan/models/common/layers.h"

namespace titan::models {

// SwiGLU feed-forward: w2(silu(w1 x) * w3 x). w1, w3 (hidden, dim), w2 (dim, hidden).
// With gelu (Gemma's GeGLU, hidden_act gelu_pytorch_tanh): w2(gelu_tanh(w1 x) * w3 x).
class FeedForward : public FeedForwardBase {
 public:
  // layer_id: the layer it sits in (depth-scaled init), -1 outside the layer stack.
  FeedForward(int64_t dim, int64_t hidden, int layer_id = -1, bool gelu = false);
  // x (T, dim) -> (T, dim).
  Tensor forward(const Tensor& x) const;
  Tensor forward(const Tensor& x, const ForwardBatch& batch, LayerCache* cache) const override;
  // w1 in-projection, w2 residual output, w3 up projection (nn::InitRole).
  void init_weights(const nn::InitContext& ctx) override;
  void repack_for_decode() override;
  Linear *w1, *w2, *w3;
  // Component override (models/common/overrides.h): composed::swiglu instead of the kernel.
  bool composed_swiglu = false;

 private:
  int layer_id_;
  bool gelu_;
};

}  // namespace titan::models
