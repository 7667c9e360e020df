// The bf16-compute LM head (titan/ops/lm_head_bf16.h): logits, logprobs and the fused
// cross-entropy on the bf16 panel GEMM; the backward of logits and logprobs on the fp32
// GEMMs over the bf16 values, the loss's on the bf16 GEMM with a bf16 gradient.
#include "titan/ops/lm_head_bf16.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>

#include "titan/kernels/cpu/bf16.h"
#include "titan/kernels/cpu/gemm.h"
#include "titan/kernels/cpu/loss.h"
#include "titan/kernels/cpu/softmax.h"
#include "titan/ops/bf16_compute.h"
#include "titan/ops/bf16_rows.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/loss_util.h"
#include "titan/ops/op_util.h"
#include "titan/ops/reduce.h"

namespace titan {

using autograd::needs_grad;
using autograd::record_fn;
using namespace ops_detail;
namespace kc = kernels::cpu;

namespace {

constexpr int64_t kTileBytes = int64_t{64} << 20;
constexpr int64_t kTileRowQuantum = 512;  // K elements per chunk of the bf16 GEMM (KCP pairs)

struct Dims {
  int64_t T, D, V;
};

void check_hidden(const char* op, const Tensor& hidden) {
  check_dtype(op, "hidden", hidden, DType::f32);
  check_dim(op, "hidden", hidden, 2);
}

Dims check_weight(const char* op, const Tensor& hidden, const Tensor& weight) {
  check_hidden(op, hidden);
  check_f32_or_bf16(op, "weight", weight);
  check_dim(op, "weight", weight, 2);
  TITAN_CHECK(weight.size(1) == hidden.size(1) && weight.size(0) >= 1,
              "{}: hidden is {} but weight is {} (weight must be (V >= 1, D) with D = {})", op,
              shape_str(hidden.shape()), shape_str(weight.shape()), hidden.size(1));
  return {hidden.size(0), hidden.size(1), weight.size(0)};
}

Dims check_bf16_panels(const char* op, const Tensor& hidden, const Tensor& panels, int64_t V,
                       std::initializer_list<const Tensor*> inputs) {
  check_hidden(op, hidden);
  check_dtype(op, "panels", panels, DType::bf16);
  check_dim(op, "panels", panels, 3);
  const int64_t pw = kc::gemm_bf16_panel_width(), D = hidden.size(1);
  TITAN_CHECK(V >= 1 && panels.size(0) == (V + pw - 1) / pw && panels.size(1) == (D + 1) / 2 * 2 &&
                  panels.size(2) == pw && panels.is_contiguous(),
              "{}: 'panels' has shape {}, expected contiguous [{}, {}, {}] for {} rows of {} "
              "(repack_linear_weight_bf16's layout)",
              op, shape_str(panels.shape()), (V + pw - 1) / pw, (D + 1) / 2 * 2, pw, V, D);
  TITAN_CHECK(!needs_grad(inputs),
              "{}: no backward: the LM head is repacked for inference (Decoder::repack_for_decode); "
              "run it with grad mode off",
              op);
  return {hidden.size(0), D, V};
}

void check_temperature(const char* op, double temperature) {
  TITAN_CHECK(std::isfinite(temperature) && temperature > 0,
              "{}: temperature must be finite and > 0, got {}", op, temperature);
}

const uint32_t* dwords(const Tensor& panels) {
  return reinterpret_cast<const uint32_t*>(panels.data<uint16_t>());
}

// out rows (rows, V) = the head's fp32 logits of the bf16 rows hb (rows, D).
void head_rows(const uint16_t* hb, const uint32_t* bp, int64_t rows, const Dims& d, float* out) {
  kc::gemm_bf16_panels(rows, d.V, d.D, hb, d.D, bp, out, d.V, /*accumulate=*/false);
}

// logprobs (T) and lse (T) of the bf16 rows hb on the panels bp, a tile of rows at a time.
void logprobs_tiles(const uint16_t* hb, const uint32_t* bp, const int64_t* y, const Dims& d,
                    float inv_t, float* lp, float* lse) {
  if (d.T == 0) return;
  const int64_t R = lm_head_bf16_tile_rows(d.T, d.V);
  Tensor buf = Tensor::empty({R, d.V});
  for (int64_t r0 = 0; r0 < d.T; r0 += R) {
    const int64_t rows = std::min(R, d.T - r0);
    head_rows(hb + r0 * d.D, bp, rows, d, buf.data<float>());
    kc::logprobs_from_logits(lp + r0, lse ? lse + r0 : nullptr, buf.data<float>(), y + r0, rows,
                             d.V, inv_t);
  }
}

// f32 copy of a bf16 tensor (exact).
Tensor widen(const Tensor& b) {
  Tensor out = Tensor::empty(b.shape());
  const uint16_t* src = b.data<uint16_t>();
  float* dst = out.data<float>();
  parallel_for_grain(b.numel(), kGrain, [&](int64_t s, int64_t e) { kc::cast_bf16_to_f32(src + s, dst + s, e - s); });
  return out;
}

// dhidden (rows, D) = g (rows, V) · wf (V, D); dweight (V, D) (+)= gᵀ · hf (rows, D).
void head_grad(const float* g, const float* wf, const float* hf, int64_t rows, const Dims& d, float* dh,
               float* dw, bool accumulate_dw) {
  if (dh) kc::gemm_f32(rows, d.D, d.V, g, d.V, wf, d.D, /*b_trans=*/false, dh, d.D, false);
  if (dw) kc::gemm_f32_tn(d.V, d.D, rows, g, d.V, hf, d.D, dw, d.D, accumulate_dw);
}

// The bf16 values (and their panels) of hidden and weight, for one call.
struct Operands {
  Tensor hb, wb, panels;
};
Operands bf16_operands(const Tensor& hidden, const Tensor& weight) {
  Operands o;
  o.hb = to_bf16_storage(hidden);
  o.wb = to_bf16_storage(weight);
  autograd::NoGradGuard ng;
  o.panels = repack_linear_weight_bf16(o.wb);
  return o;
}


// The bf16 backward of the head for one tile: g (rows, V) fp32 gradient of the logits ->
// gb = bf16(g) (RNE), then on the bf16 GEMM (fp32 accumulation, unrounded here):
//   dh (rows, D) = gb · wb          (K = V, vocabulary ascending; null to skip)
//   dw (V, D)   (+)= gbᵀ · hb rows  (K = the tile's rows, ascending; null to skip)
void bf16_grad_gemms(const float* g, uint16_t* gb, const uint16_t* wb, const uint16_t* hb, int64_t rows,
                     const Dims& d, float* dh, float* dw, bool accumulate_dw) {
  cast_f32_to_bf16_parallel(g, gb, rows * d.V);
  if (dh) kc::gemm_bf16(rows, d.D, d.V, gb, d.V, false, wb, d.D, false, dh, d.D, false);
  if (dw) kc::gemm_bf16(d.V, d.D, rows, gb, d.V, true, hb, d.D, false, dw, d.D, accumulate_dw);
}

// The fused bf16 cross-entropy over row tiles (lm_head_bf16_tile_rows). Per tile: the
// head's fp32 logits; with loss: loss and lse of the tile (cross_entropy_logits_fwd);
// with dloss: the fp32 loss gradient of those logits (cross_entropy_logits_bwd, reading
// lse) and bf16_grad_gemms. dh and dw (either may be null) are rounded to bf16 at the end.
void ce_bf16_tiles(const Operands& o, const Dims& d, const int64_t* y, int64_t ignore_index, float z, float* loss,
                   float* lse, const float* dloss, float* dh, float* dw) {
  if (dw && d.T == 0) std::fill(dw, dw + d.V * d.D, 0.0f);
  if (d.T == 0) return;
  const int64_t R = lm_head_bf16_tile_rows(d.T, d.V);
  Tensor buf = Tensor::empty({R, d.V});
  Tensor gb = dloss ? Tensor::empty({R, d.V}, DType::bf16) : Tensor();
  const uint16_t* hb = o.hb.data<uint16_t>();
  for (int64_t r0 = 0; r0 < d.T; r0 += R) {
    const int64_t rows = std::min(R, d.T - r0);
    float* b = buf.data<float>();
    head_rows(hb + r0 * d.D, dwords(o.panels), rows, d, b);
    if (loss) kc::cross_entropy_logits_fwd(loss + r0, lse + r0, b, y + r0, rows, d.V, ignore_index, z, 1.0f);
    if (!dloss) continue;
    kc::cross_entropy_logits_bwd(b, dloss + r0, b, y + r0, lse + r0, rows, d.V, ignore_index, z, 1.0f);
    bf16_grad_gemms(b, gb.data<uint16_t>(), o.wb.data<uint16_t>(), hb + r0 * d.D, rows, d,
                    dh ? dh + r0 * d.D : nullptr, dw, r0 > 0);
  }
  if (dh) round_bf16_in_place(dh, d.T * d.D);
  if (dw) round_bf16_in_place(dw, d.V * d.D);
}

std::atomic<int64_t> g_ce_bf16_recomputes{0};

}  // namespace

int64_t lm_head_bf16_tile_rows(int64_t T, int64_t V) {
  int64_t by_budget = kTileBytes / (std::max<int64_t>(V, 1) * int64_t{sizeof(float)});
  if (by_budget >= T) return std::max<int64_t>(T, 1);
  // Several tiles: a whole number of the bf16 GEMM's K chunks when the budget allows, else even.
  by_budget -= by_budget >= kTileRowQuantum ? by_budget % kTileRowQuantum : by_budget % 2;
  return std::max<int64_t>(2, by_budget);
}

Tensor logits_bf16(const Tensor& hidden, const Tensor& weight) {
  const Dims d = check_weight("logits_bf16", hidden, weight);
  const Operands o = bf16_operands(hidden, weight);
  Tensor out = Tensor::empty({d.T, d.V});
  if (d.T > 0) head_rows(o.hb.data<uint16_t>(), dwords(o.panels), d.T, d, out.data<float>());
  if (needs_grad({&hidden, &weight})) {
    const bool gh = hidden.requires_grad(), gw = weight.requires_grad();
    record_fn("LogitsBf16", {hidden, weight}, {out}, [hb = o.hb, wb = o.wb, d, gh, gw](const std::vector<Tensor>& g) {
      const Tensor gc = contig_f32(g[0]);
      Tensor dh = gh ? Tensor::empty({d.T, d.D}) : Tensor();
      Tensor dw = gw ? Tensor::empty({d.V, d.D}) : Tensor();
      const Tensor wf = gh ? widen(wb) : Tensor(), hf = gw ? widen(hb) : Tensor();
      head_grad(gc.data<float>(), gh ? wf.data<float>() : nullptr, gw ? hf.data<float>() : nullptr, d.T, d,
                gh ? dh.data<float>() : nullptr, gw ? dw.data<float>() : nullptr, false);
      return std::vector<Tensor>{dh, dw};
    });
  }
  return out;
}

Tensor logits_panels_bf16(const Tensor& hidden, const Tensor& panels, int64_t vocab_size) {
  const Dims d = check_bf16_panels("logits_panels_bf16", hidden, panels, vocab_size, {&hidden, &panels});
  const Tensor hb = to_bf16_storage(hidden);
  Tensor out = Tensor::empty({d.T, d.V});
  if (d.T > 0) head_rows(hb.data<uint16_t>(), dwords(panels), d.T, d, out.data<float>());
  return out;
}

Tensor logprobs_bf16(const Tensor& hidden, const Tensor& weight, const Tensor& targets, double temperature) {
  const Dims d = check_weight("logprobs_bf16", hidden, weight);
  check_temperature("logprobs_bf16", temperature);
  const Tensor y = check_loss_targets("logprobs_bf16", targets, d.T, d.V, -1, false);
  const float inv_t = static_cast<float>(1.0 / temperature);
  const Operands o = bf16_operands(hidden, weight);
  Tensor out = Tensor::empty({d.T}), lse = Tensor::empty({d.T});
  logprobs_tiles(o.hb.data<uint16_t>(), dwords(o.panels), y.data<int64_t>(), d, inv_t, out.data<float>(),
                 lse.data<float>());
  if (needs_grad({&hidden, &weight})) {
    const bool gh = hidden.requires_grad(), gw = weight.requires_grad();
    record_fn("LogprobsBf16", {hidden, weight}, {out}, [o, y, lse, d, inv_t, gh, gw](const std::vector<Tensor>& g) {
      // logprob = −(cross-entropy): −g through cross_entropy_logits_bwd, tile by tile on
      // the recomputed logits (the forward's bits).
      const Tensor ng = contig_f32(neg(g[0]));
      Tensor dh = gh ? Tensor::empty({d.T, d.D}) : Tensor();
      Tensor dw = gw ? Tensor::empty({d.V, d.D}) : Tensor();
      if (gw && d.T == 0) dw = Tensor::zeros({d.V, d.D});
      const Tensor wf = gh ? widen(o.wb) : Tensor(), hf = gw ? widen(o.hb) : Tensor();
      const int64_t R = lm_head_bf16_tile_rows(d.T, d.V);
      Tensor buf = Tensor::empty({std::max<int64_t>(R, 1), d.V});
      for (int64_t r0 = 0; r0 < d.T; r0 += R) {
        const int64_t rows = std::min(R, d.T - r0);
        float* b = buf.data<float>();
        head_rows(o.hb.data<uint16_t>() + r0 * d.D, dwords(o.panels), rows, d, b);
        kc::cross_entropy_logits_bwd(b, ng.data<float>() + r0, b, y.data<int64_t>() + r0,
                                     lse.data<float>() + r0, rows, d.V, INT64_MIN, 0.0f, inv_t);
        head_grad(b, gh ? wf.data<float>() : nullptr, gw ? hf.data<float>() + r0 * d.D : nullptr, rows, d,
                  gh ? dh.data<float>() + r0 * d.D : nullptr, gw ? dw.data<float>() : nullptr, r0 > 0);
      }
      return std::vector<Tensor>{dh, dw};
    });
  }
  return out;
}

Tensor logprobs_panels_bf16(const Tensor& hidden, const Tensor& panels, int64_t vocab_size, const Tensor& targets,
                            double temperature) {
  const Dims d = check_bf16_panels("logprobs_panels_bf16", hidden, panels, vocab_size, {&hidden, &panels});
  check_temperature("logprobs_panels_bf16", temperature);
  const Tensor y = check_loss_targets("logprobs_panels_bf16", targets, d.T, d.V, -1, false);
  const Tensor hb = to_bf16_storage(hidden);
  Tensor out = Tensor::empty({d.T});
  logprobs_tiles(hb.data<uint16_t>(), dwords(panels), y.data<int64_t>(), d, static_cast<float>(1.0 / temperature),
                 out.data<float>(), nullptr);
  return out;
}

int64_t linear_cross_entropy_bf16_recomputes() { return g_ce_bf16_recomputes.load(std::memory_order_relaxed); }

Tensor linear_cross_entropy_bf16(const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                                 int64_t ignore_index, double z_loss, Reduction reduction, double expected_grad) {
  const char* op = "linear_cross_entropy_bf16";
  const Dims d = check_weight(op, hidden, weight);
  TITAN_CHECK(std::isfinite(z_loss) && z_loss >= 0, "{}: z_loss must be finite and >= 0, got {}", op, z_loss);
  check_expected_grad(op, expected_grad);
  const Tensor y = check_loss_targets(op, targets, d.T, d.V, ignore_index);
  const float z = static_cast<float>(z_loss);
  const Operands o = bf16_operands(hidden, weight);
  Tensor rows = Tensor::empty({d.T}), lse = Tensor::empty({d.T});
  const bool grad = needs_grad({&hidden, &weight});
  const bool gh = hidden.requires_grad(), gw = weight.requires_grad();
  // The gradients for the expected upstream value, computed with the forward (or none).
  std::shared_ptr<EagerGrads> eager = make_eager_grads(grad, expected_grad, reduction, gh, gw, d.T, d.D, d.V);
  if (eager) {
    const std::vector<float> dloss(static_cast<size_t>(d.T), eager->grad);
    ce_bf16_tiles(o, d, y.data<int64_t>(), ignore_index, z, rows.data<float>(), lse.data<float>(), dloss.data(),
                  gh ? eager->dh.data<float>() : nullptr, gw ? eager->dw.data<float>() : nullptr);
  } else {
    ce_bf16_tiles(o, d, y.data<int64_t>(), ignore_index, z, rows.data<float>(), lse.data<float>(), nullptr, nullptr,
                  nullptr);
  }
  if (grad)
    record_fn("LinearCrossEntropyBf16", {hidden, weight}, {rows},
              [o, y, lse, d, ignore_index, z, gh, gw, eager](const std::vector<Tensor>& g) mutable {
                const Tensor gc = contig_f32(g[0]);
                if (std::vector<Tensor> out = take_eager_grads(eager, gc); !out.empty()) return out;
                g_ce_bf16_recomputes.fetch_add(1, std::memory_order_relaxed);
                Tensor dh = gh ? Tensor::empty({d.T, d.D}) : Tensor();
                Tensor dw = gw ? Tensor::empty({d.V, d.D}) : Tensor();
                ce_bf16_tiles(o, d, y.data<int64_t>(), ignore_index, z, nullptr, lse.data<float>(),
                              gc.data<float>(), gh ? dh.data<float>() : nullptr, gw ? dw.data<float>() : nullptr);
                return std::vector<Tensor>{dh, dw};
              });
  return reduce_loss_rows(rows, y, ignore_index, reduction);
}

}  // namespace titan
