// matmul / linear over the raw GEMM kernels.
#include "titan/ops/matmul.h"

#include "titan/kernels/cpu/gemm.h"
#include "titan/ops/bf16_compute.h"
#include "titan/ops/op_util.h"
#include "titan/ops/reduce.h"

namespace titan {

using autograd::needs_grad;
using autograd::record_fn;
using namespace ops_detail;
namespace kc = kernels::cpu;

namespace {

// C (M, N) = A (M, K) · op(B), B f32 or bf16 contiguous; b_trans as in gemm.h.
void gemm_any(int64_t M, int64_t N, int64_t K, const float* A, const Tensor& B, int64_t ldb,
              bool b_trans, float* C, bool accumulate) {
  if (B.dtype() == DType::bf16)
    kc::gemm_f32_bf16(M, N, K, A, K, B.data<uint16_t>(), ldb, b_trans, C, N, accumulate);
  else
    kc::gemm_f32(M, N, K, A, K, B.data<float>(), ldb, b_trans, C, N, accumulate);
}

// Contiguous operand: f32 activations (bf16 widened), weights kept as f32/bf16.
Tensor act_f32(const Tensor& t) { return contig_f32(t); }
Tensor weight_cf(const Tensor& t) { return contig(t); }

void check_bias(const char* op, const Tensor& bias, int64_t outf) {
  if (!bias.defined()) return;
  check_f32_or_bf16(op, "bias", bias);
  TITAN_CHECK(bias.shape() == Shape{outf}, "{}: bias has shape {}, expected [{}]", op,
              shape_str(bias.shape()), outf);
}

// out (M, outf) += bias (broadcast over rows).
void add_bias(float* po, int64_t M, int64_t outf, const Tensor& bias) {
  if (!bias.defined()) return;
  std::vector<float> bv = bias.to_vector<float>();
  parallel_elems(M * outf, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) po[i] += bv[i % outf];
  });
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_f32_or_bf16("matmul", "a", a);
  check_f32_or_bf16("matmul", "b", b);
  TITAN_CHECK((a.dim() == 2 && b.dim() == 2) || (a.dim() == 3 && (b.dim() == 3 || b.dim() == 2)),
              "matmul: unsupported ranks: a is {} and b is {} (expected 2-D·2-D, 3-D·3-D or 3-D·2-D)",
              shape_str(a.shape()), shape_str(b.shape()));
  const bool batched_b = b.dim() == 3;
  const int64_t Bn = a.dim() == 3 ? a.size(0) : 1;
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  TITAN_CHECK(b.size(-2) == K, "matmul: inner sizes differ: a is {} and b is {} ({} vs {})",
              shape_str(a.shape()), shape_str(b.shape()), K, b.size(-2));
  if (batched_b)
    TITAN_CHECK(b.size(0) == Bn, "matmul: batch sizes differ: a is {} and b is {}",
                shape_str(a.shape()), shape_str(b.shape()));
  Tensor ac = act_f32(a), bc = weight_cf(b);
  Shape os = a.shape();
  os.back() = N;
  Tensor out = Tensor::empty(os);
  const float* pa = ac.data<float>();
  float* po = out.data<float>();
  auto bslice = [K, N](const Tensor& t, int64_t i) {  // (K, N) slice i of a batched b
    return make_view(t, {K, N}, {N, 1}, t.offset() + i * K * N);
  };
  if (!batched_b) {
    gemm_any(Bn * M, N, K, pa, bc, N, false, po, false);
  } else {
    for (int64_t i = 0; i < Bn; ++i)
      gemm_any(M, N, K, pa + i * M * K, bslice(bc, i), N, false, po + i * M * N, false);
  }
  if (needs_grad({&a, &b})) {
    const bool ga = a.requires_grad(), gb = b.requires_grad();
    record_fn("Matmul", {a, b}, {out},
              [ac = ac.detach(), bc = bc.detach(), ga, gb, batched_b, Bn, M, K, N, bslice,
               sa = a.shape(), sb = b.shape()](const std::vector<Tensor>& g) {
                Tensor gc = contig(g[0]);
                const float* pg = gc.data<float>();
                Tensor da, db;
                if (ga) {  // dA (.., M, K) = g (.., M, N) · Bᵀ
                  da = Tensor::empty(sa);
                  if (!batched_b) {
                    gemm_any(Bn * M, K, N, pg, bc, N, true, da.data<float>(), false);
                  } else {
                    for (int64_t i = 0; i < Bn; ++i)
                      gemm_any(M, K, N, pg + i * M * N, bslice(bc, i), N, true,
                               da.data<float>() + i * M * K, false);
                  }
                }
                if (gb) {  // dB (.., K, N) = Aᵀ · g, rows summed in ascending order
                  db = Tensor::empty(sb);
                  const float* pa = ac.data<float>();
                  if (!batched_b) {
                    kc::gemm_f32_tn(K, N, Bn * M, pa, K, pg, N, db.data<float>(), N, false);
                  } else {
                    for (int64_t i = 0; i < Bn; ++i)
                      kc::gemm_f32_tn(K, N, M, pa + i * M * K, K, pg + i * M * N, N,
                                      db.data<float>() + i * K * N, N, false);
                  }
                }
                return std::vector<Tensor>{da, db};
              });
  }
  return out;
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  if (bf16_compute()) return linear_bf16(x, w, bias);
  check_f32_or_bf16("linear", "x", x);
  check_f32_or_bf16("linear", "w", w);
  check_dim("linear", "w", w, 2);
  TITAN_CHECK(x.dim() >= 1, "linear: 'x' must have at least one dim");
  const int64_t in = w.size(1), outf = w.size(0);
  TITAN_CHECK(x.size(-1) == in, "linear: x has shape {} but w has shape {} (x.size(-1) must be {})",
              shape_str(x.shape()), shape_str(w.shape()), in);
  check_bias("linear", bias, outf);
  const int64_t M = x.numel() / std::max<int64_t>(1, in);
  Tensor xc = act_f32(x), wc = weight_cf(w);
  Shape os = x.shape();
  os.back() = outf;
  Tensor out = Tensor::empty(os);
  float* po = out.data<float>();
  gemm_any(M, outf, in, xc.data<float>(), wc, in, true, po, false);
  add_bias(po, M, outf, bias);
  if (needs_grad({&x, &w, &bias})) {
    const bool gx = x.requires_grad(), gw = w.requires_grad();
    const bool gbias = bias.defined() && bias.requires_grad();
    record_fn("Linear", {x, w, bias}, {out},
              [xc = xc.detach(), wc = wc.detach(), gx, gw, gbias, M, in, outf,
               sx = x.shape()](const std::vector<Tensor>& g) {
                Tensor gc = contig(g[0]);
                const float* pg = gc.data<float>();
                Tensor dx, dw, db;
                if (gx) {  // dX (M, in) = g (M, out) · W (out, in): "NN"
                  dx = Tensor::empty(sx);
                  gemm_any(M, in, outf, pg, wc, in, false, dx.data<float>(), false);
                }
                if (gw) {  // dW (out, in) = gᵀ · X, tokens summed in ascending order
                  dw = Tensor::empty({outf, in});
                  kc::gemm_f32_tn(outf, in, M, pg, outf, xc.data<float>(), in, dw.data<float>(), in,
                                  false);
                }
                if (gbias) db = sum(gc.reshape({M, outf}), 0);
                return std::vector<Tensor>{dx, dw, db};
              });
  }
  return out;
}

Tensor repack_linear_weight(const Tensor& w) {
  TITAN_CHECK(w.dtype() == DType::f32, "repack_linear_weight: 'w' must be f32, got {}",
              dtype_name(w.dtype()));
  check_dim("repack_linear_weight", "w", w, 2);
  const int64_t outf = w.size(0), in = w.size(1), pw = kc::gemm_panel_width();
  Tensor wc = contig(w.detach());
  Tensor panels = Tensor::empty({(outf + pw - 1) / pw, in, pw});
  kc::gemm_pack_panels(outf, in, wc.data<float>(), in, panels.data<float>());
  return panels;
}

Tensor linear_panels(const Tensor& x, const Tensor& panels, int64_t outf, const Tensor& bias) {
  if (panels.defined() && panels.dtype() == DType::bf16) return linear_panels_bf16(x, panels, outf, bias);
  check_f32_or_bf16("linear_panels", "x", x);
  const int64_t in = check_panels("linear_panels", panels, outf, {&x, &panels, &bias});
  TITAN_CHECK(x.dim() >= 1 && x.size(-1) == in,
              "linear_panels: x has shape {} but the weight has {} inputs", shape_str(x.shape()),
              in);
  check_bias("linear_panels", bias, outf);
  const int64_t M = x.numel() / std::max<int64_t>(1, in);
  Tensor xc = act_f32(x);
  Shape os = x.shape();
  os.back() = outf;
  Tensor out = Tensor::empty(os);
  float* po = out.data<float>();
  kc::gemm_f32_panels(M, outf, in, xc.data<float>(), in, panels.data<float>(), po, outf, false);
  add_bias(po, M, outf, bias);
  return out;
}

}  // namespace titan
