// rms_norm / layer_norm over kernels/cpu/norm.h, with composed twins.
#include "titan/ops/norm.h"

#include <cmath>

#include "titan/kernels/cpu/norm.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/op_util.h"
#include "titan/ops/reduce.h"

namespace titan {

using autograd::needs_grad;
using autograd::record_fn;
using namespace ops_detail;
namespace kc = kernels::cpu;

namespace {

// Validates and returns (T, D).
std::pair<int64_t, int64_t> check_norm(const char* op, const Tensor& x, const Tensor& w,
                                       const Tensor& b, double eps) {
  check_dtype(op, "x", x, DType::f32);
  TITAN_CHECK(x.dim() >= 1, "{}: 'x' must have at least one dim", op);
  const int64_t D = x.shape().back();
  TITAN_CHECK(D >= 1, "{}: 'x' has an empty last dim (shape {})", op, shape_str(x.shape()));
  for (auto [name, t] : {std::pair{"w", &w}, std::pair{"b", &b}}) {
    if (!t->defined()) continue;
    check_dtype(op, name, *t, DType::f32);
    TITAN_CHECK(t->shape() == Shape{D}, "{}: '{}' has shape {}, expected [{}] (x is {})", op, name,
                shape_str(t->shape()), D, shape_str(x.shape()));
  }
  TITAN_CHECK(std::isfinite(eps) && eps >= 0, "{}: eps must be finite and >= 0, got {}", op, eps);
  return {x.numel() / D, D};
}

const float* ptr_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

}  // namespace

Tensor rms_norm(const Tensor& x, const Tensor& w, double eps) {
  auto [T, D] = check_norm("rms_norm", x, w, Tensor(), eps);
  Tensor xc = contig(x), wc = w.defined() ? contig(w) : Tensor();
  Tensor out = Tensor::empty(x.shape()), rstd = Tensor::empty({T});
  kc::rms_norm_fwd(out.data<float>(), rstd.data<float>(), xc.data<float>(), ptr_or_null(wc), T, D,
                   static_cast<float>(eps));
  if (needs_grad({&x, &w})) {
    const bool gw = w.defined() && w.requires_grad();
    record_fn("RmsNorm", {x, w}, {out},
              [xc = xc.detach(), wc = wc.defined() ? wc.detach() : Tensor(), rstd, T = T, D = D,
               gw](const std::vector<Tensor>& g) {
                Tensor gc = contig(g[0]);
                Tensor dx = Tensor::empty(xc.shape());
                Tensor dw = gw ? Tensor::empty({D}) : Tensor();
                kc::rms_norm_bwd(dx.data<float>(), gw ? dw.data<float>() : nullptr, gc.data<float>(),
                                 xc.data<float>(), ptr_or_null(wc), rstd.data<float>(), T, D, false);
                return std::vector<Tensor>{dx, dw};
              });
  }
  return out;
}

Tensor layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  auto [T, D] = check_norm("layer_norm", x, w, b, eps);
  Tensor xc = contig(x), wc = w.defined() ? contig(w) : Tensor(), bc = b.defined() ? contig(b) : Tensor();
  Tensor out = Tensor::empty(x.shape()), mean = Tensor::empty({T}), rstd = Tensor::empty({T});
  kc::layer_norm_fwd(out.data<float>(), mean.data<float>(), rstd.data<float>(), xc.data<float>(),
                     ptr_or_null(wc), ptr_or_null(bc), T, D, static_cast<float>(eps));
  if (needs_grad({&x, &w, &b})) {
    const bool gw = w.defined() && w.requires_grad(), gb = b.defined() && b.requires_grad();
    record_fn("LayerNorm", {x, w, b}, {out},
              [xc = xc.detach(), wc = wc.defined() ? wc.detach() : Tensor(), mean, rstd, T = T,
               D = D, gw, gb](const std::vector<Tensor>& g) {
                Tensor gc = contig(g[0]);
                Tensor dx = Tensor::empty(xc.shape());
                Tensor dw = gw ? Tensor::empty({D}) : Tensor();
                Tensor db = gb ? Tensor::empty({D}) : Tensor();
                kc::layer_norm_bwd(dx.data<float>(), gw ? dw.data<float>() : nullptr,
                                   gb ? db.data<float>() : nullptr, gc.data<float>(),
                                   xc.data<float>(), ptr_or_null(wc), mean.data<float>(),
                                   rstd.data<float>(), T, D, false);
                return std::vector<Tensor>{dx, dw, db};
              });
  }
  return out;
}

namespace composed {

Tensor rms_norm(const Tensor& x, const Tensor& w, double eps) {
  check_norm("rms_norm", x, w, Tensor(), eps);
  Tensor r = rsqrt(add(mean(square(x), -1, true), eps));
  Tensor y = mul(x, r.expand(x.shape()));
  return w.defined() ? mul(y, w.expand(x.shape())) : y;
}

Tensor layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  check_norm("layer_norm", x, w, b, eps);
  Tensor xm = sub(x, mean(x, -1, true).expand(x.shape()));
  Tensor r = rsqrt(add(mean(square(xm), -1, true), eps));
  Tensor y = mul(xm, r.expand(x.shape()));
  if (w.defined()) y = mul(y, w.expand(x.shape()));
  if (b.defined()) y = add(y, b.expand(x.shape()));
  return y;
}

}  // namespace composed

}  // namespace titan
