#include "titan/ops/grouped_matmul.h"

#include "titan/kernels/cpu/grouped_gemm.h"
#include "titan/ops/op_util.h"

namespace titan {

using autograd::needs_grad;
using autograd::record_fn;
using namespace ops_detail;
namespace kc = kernels::cpu;

Tensor grouped_linear(const Tensor& x, const Tensor& w, const std::vector<int64_t>& offsets) {
  check_dtype("grouped_linear", "x", x, DType::f32);
  check_dtype("grouped_linear", "w", w, DType::f32);
  check_dim("grouped_linear", "x", x, 2);
  check_dim("grouped_linear", "w", w, 3);
  const int64_t M = x.size(0), in = x.size(1), G = w.size(0), outf = w.size(1);
  TITAN_CHECK(w.size(2) == in, "grouped_linear: x has shape {} but w has shape {} (w.size(2) must be {})",
              shape_str(x.shape()), shape_str(w.shape()), in);
  TITAN_CHECK(static_cast<int64_t>(offsets.size()) == G + 1 && offsets.back() == M,
              "grouped_linear: offsets must hold G + 1 = {} values ending at the {} rows of x ({} given, last {})",
              G + 1, M, offsets.size(), offsets.empty() ? -1 : offsets.back());
  Tensor xc = contig(x), wc = contig(w);
  Tensor out = Tensor::empty({M, outf});
  kc::grouped_gemm_f32(offsets, outf, in, xc.data<float>(), in, wc.data<float>(), true, out.data<float>(),
                       outf);
  if (needs_grad({&x, &w})) {
    const bool gx = x.requires_grad(), gw = w.requires_grad();
    record_fn("GroupedLinear", {x, w}, {out},
              [xc = xc.detach(), wc = wc.detach(), gx, gw, offsets, M, in, outf, G](const std::vector<Tensor>& g) {
                Tensor gc = contig(g[0]);
                Tensor dx, dw;
                if (gx) {  // dX rows of group g = dY · W_g, W_g (out, in) read as (K = out, N = in)
                  dx = Tensor::empty({M, in});
                  kc::grouped_gemm_f32(offsets, in, outf, gc.data<float>(), outf, wc.data<float>(), false,
                                       dx.data<float>(), in);
                }
                if (gw) {  // dW_g = dY_gᵀ · X_g
                  dw = Tensor::empty({G, outf, in});
                  kc::grouped_gemm_f32_tn(offsets, outf, in, gc.data<float>(), outf, xc.data<float>(), in,
                                          dw.data<float>());
                }
                return std::vector<Tensor>{dx, dw};
              });
  }
  return out;
}

}  // namespace titan
