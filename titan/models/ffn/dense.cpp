#include "titan/models/ffn/dense.h"

#include "titan/models/common/overrides.h"
#include "titan/ops/activation.h"
#include "titan/ops/elementwise.h"

namespace titan::models {

FeedForward::FeedForward(int64_t dim, int64_t hidden, int layer_id, bool gelu) : layer_id_(layer_id), gelu_(gelu) {
  w1 = register_module("w1", std::make_unique<Linear>(dim, hidden, false));
  w2 = register_module("w2", std::make_unique<Linear>(hidden, dim, false));
  w3 = register_module("w3", std::make_unique<Linear>(dim, hidden, false));
}

Tensor FeedForward::forward(const Tensor& x) const {
  if (gelu_) {
    TITAN_CHECK(!composed_swiglu, "model.overrides: swiglu=composed on a feed-forward with hidden_act "
                "gelu_pytorch_tanh (the override replaces the SiLU gate)");
    return w2->forward(mul(titan::gelu(w1->forward(x)), w3->forward(x)));
  }
  if (composed_swiglu) {
    count_override_call("swiglu", "composed");
    return w2->forward(composed::swiglu(w1->forward(x), w3->forward(x)));
  }
  return w2->forward(swiglu(w1->forward(x), w3->forward(x)));
}

Tensor FeedForward::forward(const Tensor& x, const ForwardBatch&, LayerCache*) const { return forward(x); }

void FeedForward::init_weights(const nn::InitContext& ctx) {
  w1->init(ctx, nn::InitRole::in_proj, layer_id_);
  w2->init(ctx, nn::InitRole::out_proj, layer_id_);
  w3->init(ctx, nn::InitRole::up_proj, layer_id_);
}

void FeedForward::repack_for_decode() {
  for (Linear* l : {w1, w2, w3}) l->repack_for_decode();
}

}  // namespace titan::models
