// softmax / log_softmax / logsumexp over the row kernels of kernels/cpu/softmax.h.
#include "titan/ops/softmax.h"

#include <cmath>

#include "titan/kernels/cpu/softmax.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/op_util.h"
#include "titan/ops/reduce.h"

namespace titan {

using autograd::needs_grad;
using autograd::record_fn;
using namespace ops_detail;
namespace kc = kernels::cpu;

namespace {

struct Rows {
  int64_t T, V;
};

// Validates x and returns the wrapped dim (its size must be > 0).
int64_t check_rows(const char* op, const Tensor& x, int64_t dim) {
  check_dtype(op, "x", x, DType::f32);
  TITAN_CHECK(x.dim() > 0, "{}: 'x' must have at least one dim", op);
  const int64_t d = wrap_dim(op, dim, x.dim());
  TITAN_CHECK(x.shape()[d] > 0, "{}: cannot reduce the empty dim {} of shape {}", op, d,
              shape_str(x.shape()));
  return d;
}

Rows rows_of(const Tensor& x) {
  const int64_t V = x.shape().back();
  return {x.numel() / V, V};
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  const int64_t d = check_rows("softmax", x, dim);
  if (d != x.dim() - 1) return softmax(x.transpose(d, -1), -1).transpose(d, -1);
  Tensor xc = contig(x);
  Tensor out = Tensor::empty(x.shape());
  const Rows r = rows_of(x);
  kc::softmax_fwd(out.data<float>(), xc.data<float>(), r.T, r.V);
  if (needs_grad({&x}))
    record_fn("Softmax", {x}, {out}, [y = out.detach(), r](const std::vector<Tensor>& g) {
      Tensor gc = contig(g[0]);
      Tensor dx = Tensor::empty(y.shape());
      kc::softmax_bwd(dx.data<float>(), gc.data<float>(), y.data<float>(), r.T, r.V);
      return std::vector<Tensor>{dx};
    });
  return out;
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  const int64_t d = check_rows("log_softmax", x, dim);
  if (d != x.dim() - 1) return log_softmax(x.transpose(d, -1), -1).transpose(d, -1);
  Tensor xc = contig(x);
  Tensor out = Tensor::empty(x.shape());
  const Rows r = rows_of(x);
  kc::log_softmax_fwd(out.data<float>(), nullptr, xc.data<float>(), r.T, r.V);
  if (needs_grad({&x}))
    record_fn("LogSoftmax", {x}, {out}, [y = out.detach(), r](const std::vector<Tensor>& g) {
      Tensor gc = contig(g[0]);
      Tensor dx = Tensor::empty(y.shape());
      kc::log_softmax_bwd(dx.data<float>(), gc.data<float>(), y.data<float>(), r.T, r.V);
      return std::vector<Tensor>{dx};
    });
  return out;
}

Tensor logsumexp(const Tensor& x, int64_t dim, bool keepdim) {
  const int64_t d = check_rows("logsumexp", x, dim);
  if (d != x.dim() - 1) {
    Tensor r = logsumexp(x.transpose(d, -1), -1, true).transpose(d, -1);
    return keepdim ? r : r.squeeze(d);
  }
  Tensor xc = contig(x);
  Shape ks = x.shape();
  ks.back() = 1;
  Tensor lse = Tensor::empty(ks);
  const Rows r = rows_of(x);
  kc::logsumexp_fwd(lse.data<float>(), xc.data<float>(), r.T, r.V);
  if (needs_grad({&x}))
    record_fn("LogSumExp", {x}, {lse},
              [xc = xc.detach(), lse = lse.detach()](const std::vector<Tensor>& g) {
                // d lse / dx = softmax(x) = exp(x − lse)
                const Shape& s = xc.shape();
                return std::vector<Tensor>{mul(g[0].expand(s), exp(sub(xc, lse.expand(s))))};
              });
  return keepdim ? lse : lse.squeeze(-1);
}

namespace composed {

Tensor logsumexp(const Tensor& x, int64_t dim, bool keepdim) {
  const int64_t d = check_rows("logsumexp", x, dim);
  // m + log Σ exp(x − m), m = max (0 where the max is ±inf), m treated as a constant.
  Tensor m;
  {
    autograd::NoGradGuard ng;
    m = max(x, d, true).values;
    float* pm = m.data<float>();
    for (int64_t i = 0; i < m.numel(); ++i)
      if (std::isinf(pm[i])) pm[i] = 0.0f;
  }
  Tensor lse = add(log(sum(exp(sub(x, m.expand(x.shape()))), d, true)), m);
  return keepdim ? lse : lse.squeeze(d);
}

Tensor softmax(const Tensor& x) {
  check_rows("softmax", x, -1);
  Tensor m;
  {
    autograd::NoGradGuard ng;
    m = max(x, -1, true).values;
  }
  Tensor e = exp(sub(x, m.expand(x.shape())));
  return div(e, sum(e, -1, true).expand(x.shape()));
}

Tensor log_softmax(const Tensor& x) {
  return sub(x, composed::logsumexp(x, -1, true).expand(x.shape()));
}

}  // namespace composed

}  // namespace titan
