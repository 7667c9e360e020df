#include "titan/optim/muon.h"

#include <algorithm>
#include <cmath>

#include "titan/core/error.h"
#include "titan/kernels/cpu/gemm.h"
#include "titan/optim/kernels.h"

namespace titan::optim {

MuonAdjustLr parse_muon_adjust_lr(std::string_view s) {
  if (s == "original") return MuonAdjustLr::original;
  if (s == "match_rms_adamw") return MuonAdjustLr::match_rms_adamw;
  fail("Muon: adjust_lr '{}' is not known (expected original or match_rms_adamw)", s);
}

std::string_view muon_adjust_lr_name(MuonAdjustLr a) {
  return a == MuonAdjustLr::original ? "original" : "match_rms_adamw";
}

namespace {

void grow(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

// dst (cols, rows) = src (rows, cols)ᵀ, in 32×32 tiles; parallel over row tiles of dst.
void transpose(float* dst, const float* src, int64_t rows, int64_t cols) {
  constexpr int64_t T = 32;
  const int64_t tiles = (cols + T - 1) / T;
  parallel_for_grain(tiles, 4, [&](int64_t tb, int64_t te) {
    for (int64_t jt = tb * T; jt < std::min(cols, te * T); jt += T)
      for (int64_t it = 0; it < rows; it += T)
        for (int64_t j = jt; j < std::min(cols, jt + T); ++j)
          for (int64_t i = it; i < std::min(rows, it + T); ++i) dst[j * rows + i] = src[i * cols + j];
  });
}

template <class F>
void each(int64_t n, F f) {
  parallel_elementwise(n, [&](int64_t b, int64_t e) { f(b, e - b); });
}

}  // namespace

void newton_schulz(float* out, const float* G, int64_t rows, int64_t cols, int steps,
                   MuonWorkspace& ws, const NewtonSchulzCoeffs& k, double eps) {
  TITAN_CHECK(rows >= 1 && cols >= 1, "newton_schulz: shape ({}, {}) must be at least (1, 1)",
              rows, cols);
  TITAN_CHECK(steps >= 0, "newton_schulz: steps must be >= 0, got {}", steps);
  namespace kc = titan::kernels::cpu;
  const bool tr = rows > cols;
  const int64_t r = tr ? cols : rows, c = tr ? rows : cols, n = r * c;
  grow(ws.x, n);
  grow(ws.gram, r * r);
  grow(ws.gram2, r * r);
  grow(ws.prod, n);
  float* X = ws.x.data();
  float* A = ws.gram.data();
  float* B = ws.gram2.data();
  float* P = ws.prod.data();
  if (tr) transpose(X, G, rows, cols);
  else std::copy(G, G + n, X);

  // X / (‖X‖_F + eps): norm summed in double in a fixed order, rounded to fp32 as the
  // reference's fp32/bf16 norm; then the fp32 sum with eps (torch: tensor + scalar).
  const float nrm = static_cast<float>(std::sqrt(kernels::sum_squares(X, n)));
  const float den = nrm + static_cast<float>(eps);
  each(n, [&](int64_t b, int64_t m) { kernels::divide(X + b, den, m); });

  const float fa = static_cast<float>(k.a), fb = static_cast<float>(k.b),
              fc = static_cast<float>(k.c);
  for (int s = 0; s < steps; ++s) {
    kc::gemm_f32(r, r, c, X, c, X, c, /*b_trans=*/true, A, r, false);  // A = X Xᵀ
    each(r * r, [&](int64_t b, int64_t m) { kernels::scale_to(B + b, A + b, fc, m); });  // c·A
    kc::gemm_f32(r, r, r, B, r, A, r, /*b_trans=*/false, P, r, false);  // (c·A) A
    each(r * r, [&](int64_t b, int64_t m) { kernels::scale_add(B + b, fb, A + b, P + b, m); });
    kc::gemm_f32(r, c, r, B, r, X, c, /*b_trans=*/false, P, c, false);  // B X
    each(n, [&](int64_t b, int64_t m) { kernels::scale_add(X + b, fa, X + b, P + b, m); });
  }
  if (tr) transpose(out, X, r, c);
  else std::copy(X, X + n, out);
}

MuonScale muon_scale(const MuonHyper& h, int64_t rows, int64_t cols) {
  if (h.adjust_lr == MuonAdjustLr::original) {
    // muon_update: update *= max(1, grad.size(-2) / grad.size(-1))**0.5
    const double ratio = std::max(1.0, static_cast<double>(rows) / static_cast<double>(cols));
    return {h.lr, std::pow(ratio, 0.5)};
  }
  // torch.optim.Muon _adjust_lr: lr * (0.2 * math.sqrt(max(A, B)))
  const double ratio = 0.2 * std::sqrt(static_cast<double>(std::max(rows, cols)));
  return {h.lr * ratio, 1.0};
}

void muon_step(float* param, float* momentum_buffer, const float* grad, int64_t rows,
               int64_t cols, const MuonHyper& h, MuonWorkspace& ws) {
  const int64_t n = rows * cols;
  const float w_buf = static_cast<float>(1 - h.momentum), w_nes = static_cast<float>(h.momentum);
  // momentum.lerp_(grad, 1 - beta); update = grad.lerp(momentum, beta) if nesterov.
  grow(ws.update, n);
  float* U = ws.update.data();
  each(n, [&](int64_t b, int64_t m) {
    kernels::lerp(momentum_buffer + b, momentum_buffer + b, grad + b, w_buf, m);
    if (h.nesterov) kernels::lerp(U + b, grad + b, momentum_buffer + b, w_nes, m);
  });
  const float* src = h.nesterov ? U : momentum_buffer;
  // The orthogonalised update overwrites U (newton_schulz copies its input first).
  newton_schulz(U, src, rows, cols, h.ns_steps, ws);
  const MuonScale sc = muon_scale(h, rows, cols);
  const float decay = static_cast<float>(1 - h.lr * h.weight_decay);
  const float alpha = static_cast<float>(-sc.step_lr);
  const float us = static_cast<float>(sc.update_scale);
  each(n, [&](int64_t b, int64_t m) {
    if (sc.update_scale != 1.0) kernels::scale(U + b, us, m);
    kernels::scale(param + b, decay, m);
    kernels::axpy(param + b, alpha, U + b, m);
  });
}

}  // namespace titan::optim
