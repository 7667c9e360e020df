// Activations: fused kernels of titan/kernels/cpu/activation.h + composed twins.
#include "titan/ops/activation.h"

#include <algorithm>
#include <cmath>

#include "titan/kernels/cpu/activation.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/op_util.h"

namespace titan {

using autograd::needs_grad;
using autograd::record_fn;
using namespace ops_detail;
namespace kc = kernels::cpu;

namespace {

// out = kernel(x) over contiguous f32 data.
template <typename K>
Tensor run_unary(const char* op, const Tensor& x, K kernel) {
  check_dtype(op, "x", x, DType::f32);
  Tensor xc = contig(x);
  Tensor out = Tensor::empty(x.shape());
  kernel(out.data<float>(), xc.data<float>(), out.numel());
  return out;
}

}  // namespace

Tensor relu(const Tensor& x) {
  check_dtype("relu", "x", x, DType::f32);
  Tensor xc = contig(x);
  Tensor out = Tensor::empty(x.shape());
  const float* px = xc.data<float>();
  float* po = out.data<float>();
  parallel_elems(out.numel(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) po[i] = px[i] > 0.0f ? px[i] : 0.0f;
  });
  if (needs_grad({&x}))
    record_fn("Relu", {x}, {out}, [out = out.detach()](const std::vector<Tensor>& g) {
      Tensor gc = contig(g[0]);
      Tensor dx = Tensor::empty(out.shape());
      const float* pg = gc.data<float>();
      const float* py = out.data<float>();
      float* pd = dx.data<float>();
      parallel_elems(dx.numel(), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) pd[i] = py[i] > 0.0f ? pg[i] : 0.0f;
      });
      return std::vector<Tensor>{dx};
    });
  return out;
}

Tensor silu(const Tensor& x) {
  Tensor out = run_unary("silu", x, [](float* o, const float* i, int64_t n) { kc::silu_fwd(o, i, n); });
  if (needs_grad({&x}))
    record_fn("Silu", {x}, {out}, [xc = contig(x).detach()](const std::vector<Tensor>& g) {
      Tensor gc = contig(g[0]);
      Tensor dx = Tensor::empty(xc.shape());
      kc::silu_bwd(dx.data<float>(), gc.data<float>(), xc.data<float>(), dx.numel());
      return std::vector<Tensor>{dx};
    });
  return out;
}

Tensor gelu(const Tensor& x) {
  Tensor out =
      run_unary("gelu", x, [](float* o, const float* i, int64_t n) { kc::gelu_tanh_fwd(o, i, n); });
  if (needs_grad({&x}))
    record_fn("Gelu", {x}, {out}, [xc = contig(x).detach()](const std::vector<Tensor>& g) {
      Tensor gc = contig(g[0]);
      Tensor dx = Tensor::empty(xc.shape());
      kc::gelu_tanh_bwd(dx.data<float>(), gc.data<float>(), xc.data<float>(), dx.numel());
      return std::vector<Tensor>{dx};
    });
  return out;
}

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  check_dtype("swiglu", "gate", gate, DType::f32);
  check_dtype("swiglu", "up", up, DType::f32);
  TITAN_CHECK(gate.shape() == up.shape(), "swiglu: gate has shape {} but up has shape {}",
              shape_str(gate.shape()), shape_str(up.shape()));
  Tensor gc = contig(gate), uc = contig(up);
  Tensor out = Tensor::empty(gate.shape());
  kc::swiglu_fwd(out.data<float>(), gc.data<float>(), uc.data<float>(), out.numel());
  if (needs_grad({&gate, &up}))
    record_fn("Swiglu", {gate, up}, {out},
              [gc = gc.detach(), uc = uc.detach()](const std::vector<Tensor>& g) {
                Tensor dc = contig(g[0]);
                Tensor dg = Tensor::empty(gc.shape()), du = Tensor::empty(gc.shape());
                kc::swiglu_bwd(dg.data<float>(), du.data<float>(), dc.data<float>(),
                               gc.data<float>(), uc.data<float>(), dg.numel());
                return std::vector<Tensor>{dg, du};
              });
  return out;
}

Tensor swiglu_oai(const Tensor& gate, const Tensor& up, double alpha, double limit) {
  check_dtype("swiglu_oai", "gate", gate, DType::f32);
  check_dtype("swiglu_oai", "up", up, DType::f32);
  TITAN_CHECK(gate.shape() == up.shape(), "swiglu_oai: gate has shape {} but up has shape {}",
              shape_str(gate.shape()), shape_str(up.shape()));
  TITAN_CHECK(limit > 0 && alpha > 0, "swiglu_oai: limit ({}) and alpha ({}) must be > 0", limit, alpha);
  Tensor gc = contig(gate), uc = contig(up);
  Tensor out = Tensor::empty(gate.shape());
  const float a = static_cast<float>(alpha), lim = static_cast<float>(limit);
  {
    const float* pg = gc.data<float>();
    const float* pu = uc.data<float>();
    float* po = out.data<float>();
    for (int64_t i = 0, n = out.numel(); i < n; ++i) {
      const float g = std::min(pg[i], lim), u = std::clamp(pu[i], -lim, lim);
      const float s = 1.0f / (1.0f + std::exp(-a * g));
      po[i] = (u + 1.0f) * (g * s);
    }
  }
  if (needs_grad({&gate, &up}))
    record_fn("SwigluOai", {gate, up}, {out},
              [gc = gc.detach(), uc = uc.detach(), alpha, limit](const std::vector<Tensor>& gr) {
                Tensor dc = contig(gr[0]);
                Tensor dg = Tensor::empty(gc.shape()), du = Tensor::empty(gc.shape());
                const float* pd = dc.data<float>();
                const float* pg = gc.data<float>();
                const float* pu = uc.data<float>();
                float* pdg = dg.data<float>();
                float* pdu = du.data<float>();
                for (int64_t i = 0, n = dg.numel(); i < n; ++i) {
                  const double g = std::min<double>(pg[i], limit), u = std::clamp<double>(pu[i], -limit, limit);
                  const double s = 1.0 / (1.0 + std::exp(-alpha * g));
                  const double glu = g * s, dglu = s + alpha * g * s * (1.0 - s);
                  pdg[i] = static_cast<float>(pg[i] > limit ? 0.0 : pd[i] * (u + 1.0) * dglu);
                  pdu[i] = static_cast<float>(std::fabs(pu[i]) > limit ? 0.0 : pd[i] * glu);
                }
                return std::vector<Tensor>{dg, du};
              });
  return out;
}

namespace composed {

Tensor silu(const Tensor& x) { return mul(x, sigmoid(x)); }

Tensor gelu(const Tensor& x) {
  const double k = std::sqrt(2.0 / M_PI);
  Tensor u = scale(add(x, scale(mul(square(x), x), 0.044715)), k);
  return mul(scale(x, 0.5), add(tanh(u), 1.0));
}

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  TITAN_CHECK(gate.shape() == up.shape(), "swiglu: gate has shape {} but up has shape {}",
              shape_str(gate.shape()), shape_str(up.shape()));
  return mul(composed::silu(gate), up);
}

}  // namespace composed

}  // namespace titan
