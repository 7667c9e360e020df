#include "titan/nn/init.h"

#include <cmath>

#include "titan/autograd/node.h"
#include "titan/core/philox.h"

namespace titan::nn {

void InitContext::normal(Tensor& t, double std, double trunc) const {
  auto it = streams.find(t.unsafe_impl());
  TITAN_CHECK(it != streams.end(), "InitContext::normal: tensor of shape {} is not a parameter of the model",
              shape_str(t.shape()));
  const uint64_t stream = it->second;
  autograd::NoGradGuard ng;
  float* p = t.data<float>();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    for (uint64_t attempt = 0;; ++attempt) {
      auto r = philox_draw(seed ^ (stream * 0x9E3779B97F4A7C15ull), static_cast<uint64_t>(i) | (attempt << 40), stream);
      float z = box_muller(r[0], r[1]);
      if (trunc <= 0 || std::fabs(z) <= trunc) {
        p[i] = static_cast<float>(z * std);
        break;
      }
    }
  }
}

void InitContext::constant(Tensor& t, double value) {
  autograd::NoGradGuard ng;
  t.fill_(value);
}

void InitContext::init(Tensor& w, InitRole role, int layer_id) const {
  const double D = static_cast<double>(hidden_size), L = static_cast<double>(num_layers);
  if (style == InitStyle::gpt2) {
    normal(w, role == InitRole::out_proj ? 0.02 / std::sqrt(2.0 * L) : 0.02);
    return;
  }
  switch (role) {
    case InitRole::in_proj:
      normal(w, 0.02);  // torch trunc_normal_ a=-2, b=2 are absolute: no cut at 0.02
      return;
    case InitRole::out_proj:
    case InitRole::up_proj:
      normal(w, 0.02 / std::sqrt(2.0 * (layer_id + 1)));
      return;
    case InitRole::embedding:
      if (tied_embeddings) normal(w, std::pow(D, -0.5), 3.0);
      else normal(w, 1.0);
      return;
    case InitRole::lm_head:
      normal(w, std::pow(D, -0.5), 3.0);
      return;
  }
}

}  // namespace titan::nn
