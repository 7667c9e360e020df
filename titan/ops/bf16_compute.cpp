// bf16 compute scope, casts and linear on the bf16 GEMM (titan/ops/bf16_compute.h).
#include "titan/ops/bf16_compute.h"

#include "titan/kernels/cpu/bf16.h"
#include "titan/ops/bf16_rows.h"
#include "titan/ops/op_util.h"
#include "titan/ops/reduce.h"

namespace titan {

using autograd::needs_grad;
using autograd::record_fn;
using namespace ops_detail;
namespace kc = kernels::cpu;

namespace {
thread_local bool t_bf16 = false;

// out (M, outf) += bias (broadcast over rows), fp32.
void add_bias_rows(float* po, int64_t M, int64_t outf, const Tensor& bias) {
  if (!bias.defined()) return;
  const std::vector<float> bv = bias.to_vector<float>();
  parallel_elems(M * outf, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) po[i] += bv[static_cast<size_t>(i % outf)];
  });
}

void round_in_place(Tensor& t) { round_bf16_in_place(t.data<float>(), t.numel()); }
}  // namespace

namespace ops_detail {
void round_bf16_in_place(float* x, int64_t n) {
  parallel_for_grain(n, kGrain, [&](int64_t b, int64_t e) { kc::round_to_bf16(x + b, e - b); });
}
void cast_f32_to_bf16_parallel(const float* src, uint16_t* dst, int64_t n) {
  parallel_for_grain(n, kGrain, [&](int64_t b, int64_t e) { kc::cast_f32_to_bf16(src + b, dst + b, e - b); });
}
}  // namespace ops_detail

bool bf16_compute() { return t_bf16; }

Bf16ComputeScope::Bf16ComputeScope(bool enable) : prev_(t_bf16) { t_bf16 = prev_ || enable; }
Bf16ComputeScope::~Bf16ComputeScope() { t_bf16 = prev_; }

Tensor to_bf16_storage(const Tensor& t) {
  autograd::NoGradGuard ng;
  if (t.dtype() == DType::bf16) return contig(t);
  Tensor c = contig_f32(t);
  Tensor out = Tensor::empty(t.shape(), DType::bf16);
  const float* src = c.data<float>();
  uint16_t* dst = out.data<uint16_t>();
  cast_f32_to_bf16_parallel(src, dst, c.numel());
  return out;
}

Tensor round_bf16(const Tensor& x) {
  Tensor out;
  {
    autograd::NoGradGuard ng;
    out = contig_f32(x).clone();
  }
  round_in_place(out);
  if (needs_grad({&x}))
    record_fn("RoundBf16", {x}, {out}, [](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; });
  return out;
}

Tensor linear_bf16(const Tensor& x, const Tensor& w, const Tensor& bias) {
  check_f32_or_bf16("linear", "x", x);
  check_f32_or_bf16("linear", "w", w);
  check_dim("linear", "w", w, 2);
  TITAN_CHECK(x.dim() >= 1, "linear: 'x' must have at least one dim");
  const int64_t in = w.size(1), outf = w.size(0);
  TITAN_CHECK(x.size(-1) == in, "linear: x has shape {} but w has shape {} (x.size(-1) must be {})",
              shape_str(x.shape()), shape_str(w.shape()), in);
  if (bias.defined()) {
    check_f32_or_bf16("linear", "bias", bias);
    TITAN_CHECK(bias.shape() == Shape{outf}, "linear: bias has shape {}, expected [{}]",
                shape_str(bias.shape()), outf);
  }
  const int64_t M = x.numel() / std::max<int64_t>(1, in);
  Tensor xb = to_bf16_storage(x), wb = to_bf16_storage(w);
  Shape os = x.shape();
  os.back() = outf;
  Tensor out = Tensor::empty(os);
  kc::gemm_bf16(M, outf, in, xb.data<uint16_t>(), in, false, wb.data<uint16_t>(), in, true,
                out.data<float>(), outf, false);
  add_bias_rows(out.data<float>(), M, outf, bias);
  round_in_place(out);
  if (needs_grad({&x, &w, &bias})) {
    const bool gx = x.requires_grad(), gw = w.requires_grad();
    const bool gbias = bias.defined() && bias.requires_grad();
    record_fn("LinearBf16", {x, w, bias}, {out},
              [xb, wb, gx, gw, gbias, M, in, outf, sx = x.shape()](const std::vector<Tensor>& g) {
                Tensor gb = to_bf16_storage(g[0]);
                const uint16_t* pg = gb.data<uint16_t>();
                Tensor dx, dw, db;
                if (gx) {  // dX (M, in) = dY (M, out) · W (out, in): B "NN"
                  dx = Tensor::empty(sx);
                  kc::gemm_bf16(M, in, outf, pg, outf, false, wb.data<uint16_t>(), in, false,
                                dx.data<float>(), in, false);
                  round_in_place(dx);
                }
                if (gw) {  // dW (out, in) = dYᵀ · X: A = dY stored (M, out), tokens ascending
                  dw = Tensor::empty({outf, in});
                  kc::gemm_bf16(outf, in, M, pg, outf, true, xb.data<uint16_t>(), in, false,
                                dw.data<float>(), in, false);
                  round_in_place(dw);
                }
                if (gbias) db = sum(contig_f32(g[0]).reshape({M, outf}), 0);
                return std::vector<Tensor>{dx, dw, db};
              });
  }
  return out;
}

Tensor repack_linear_weight_bf16(const Tensor& w) {
  check_f32_or_bf16("repack_linear_weight_bf16", "w", w);
  check_dim("repack_linear_weight_bf16", "w", w, 2);
  const int64_t outf = w.size(0), in = w.size(1), pw = kc::gemm_bf16_panel_width();
  const Tensor wb = to_bf16_storage(w.detach());
  Tensor panels = Tensor::empty({(outf + pw - 1) / pw, 2 * ((in + 1) / 2), pw}, DType::bf16);
  kc::gemm_bf16_pack_panels(outf, in, wb.data<uint16_t>(), in,
                            reinterpret_cast<uint32_t*>(panels.data<uint16_t>()));
  return panels;
}

Tensor linear_panels_bf16(const Tensor& x, const Tensor& panels, int64_t outf, const Tensor& bias) {
  const char* op = "linear_panels_bf16";
  check_f32_or_bf16(op, "x", x);
  check_dtype(op, "panels", panels, DType::bf16);
  check_dim(op, "panels", panels, 3);
  const int64_t pw = kc::gemm_bf16_panel_width();
  TITAN_CHECK(outf >= 1 && panels.size(2) == pw && panels.size(0) == (outf + pw - 1) / pw &&
                  panels.is_contiguous(),
              "{}: 'panels' has shape {}, expected contiguous [{}, K, {}] for {} rows "
              "(repack_linear_weight_bf16's layout)",
              op, shape_str(panels.shape()), (outf + pw - 1) / pw, pw, outf);
  TITAN_CHECK(!autograd::needs_grad({&x, &panels, &bias}),
              "{}: no backward: the weight is repacked for inference (Decoder::repack_for_decode); "
              "run it with grad mode off",
              op);
  TITAN_CHECK(x.dim() >= 1 && (x.size(-1) + 1) / 2 * 2 == panels.size(1),
              "{}: x has shape {} but the panels hold K = {} (rounded up to even)", op,
              shape_str(x.shape()), panels.size(1));
  const int64_t in = x.size(-1), M = x.numel() / std::max<int64_t>(1, in);
  if (bias.defined()) {
    check_f32_or_bf16(op, "bias", bias);
    TITAN_CHECK(bias.shape() == Shape{outf}, "{}: bias has shape {}, expected [{}]", op,
                shape_str(bias.shape()), outf);
  }
  const Tensor xb = to_bf16_storage(x);
  Shape os = x.shape();
  os.back() = outf;
  Tensor out = Tensor::empty(os);
  kc::gemm_bf16_panels(M, outf, in, xb.data<uint16_t>(), in,
                       reinterpret_cast<const uint32_t*>(panels.data<uint16_t>()), out.data<float>(),
                       outf, false);
  add_bias_rows(out.data<float>(), M, outf, bias);
  round_in_place(out);
  return out;
}

}  // namespace titan
