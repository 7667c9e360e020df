// Muon ("MomentUm Orthogonalized by Newton–Schulz"), Keller Jordan et al. 2024,
// "Muon: An optimizer for hidden layers in neural networks",
// https://kellerjordan.github.io/posts/muon/ and github.com/KellerJordan/Muon
// (muon.py: zeropower_via_newtonschulz5, muon_update, Muon.step). For 2-D hidden
// matrices only; the optimizer object runs AdamW on every other parameter.
//
// Per step, for a (rows, cols) parameter with gradient G and momentum buffer M:
//   M ← lerp(M, G, 1 − μ)                       (= μM + (1−μ)G, torch.lerp_)
//   U ← nesterov ? lerp(G, M, μ) : M            (the reference mutates G; we do not)
//   O ← NS5(U)                                  (below)
//   adjust_lr = original:        O ← O · max(1, rows/cols)^0.5, step lr   (reference)
//               match_rms_adamw: step lr · 0.2 · √max(rows, cols)   (Moonshot AI,
//                 "Muon is Scalable for LLM Training" 2025; torch.optim.Muon's
//                 adjust_lr_fn="match_rms_adamw": the update RMS matches AdamW's)
//   p ← p · (1 − lr·wd)                         (decoupled decay, unadjusted lr)
//   p ← p − step_lr · O                         (torch add_(O, alpha=−step_lr): an FMA)
//
// NS5 (zeropower_via_newtonschulz5): X = U, transposed when rows > cols (work on the
// short side); X ← X / (‖X‖_F + 1e-7); 5 times: A = X·Xᵀ, B = b·A + (c·A)·A,
// X ← a·X + B·X, with (a, b, c) = (3.4445, −4.7750, 2.0315); transpose back.
// The reference runs NS in bf16; titan runs it in fp32 (the Frobenius norm is summed
// in double), through titan::kernels::cpu::gemm_f32 — so results are bitwise
// reproducible and independent of the thread count, but differ from the bf16
// reference by bf16 rounding.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

namespace titan::optim {

enum class MuonAdjustLr { original, match_rms_adamw };
// "original" | "match_rms_adamw"; throws titan::Error naming the value otherwise.
MuonAdjustLr parse_muon_adjust_lr(std::string_view s);
std::string_view muon_adjust_lr_name(MuonAdjustLr a);

struct NewtonSchulzCoeffs {
  double a = 3.4445, b = -4.7750, c = 2.0315;  // Keller Jordan's quintic coefficients
};

// Scratch buffers reused across calls (grown on demand).
struct MuonWorkspace {
  std::vector<float> x, gram, gram2, prod, update;
};

// out (rows, cols) = NS(G (rows, cols)) with `steps` iterations, fp32 (out may alias
// G: G is copied into the workspace first). eps: the 1e-7 added to the Frobenius norm. Throws titan::Error on
// rows/cols < 1 or steps < 0.
void newton_schulz(float* out, const float* G, int64_t rows, int64_t cols, int steps,
                   MuonWorkspace& ws, const NewtonSchulzCoeffs& coeffs = {}, double eps = 1e-7);

struct MuonHyper {
  double lr = 0.02;
  double momentum = 0.95;
  double weight_decay = 0.0;
  bool nesterov = true;
  int ns_steps = 5;
  MuonAdjustLr adjust_lr = MuonAdjustLr::original;
};

// The learning rate multiplying the orthogonalised update, and the fp32 factor the
// update itself is scaled by, for a (rows, cols) matrix (see the header comment).
struct MuonScale {
  double step_lr;
  double update_scale;  // 1 when no scaling is applied
};
MuonScale muon_scale(const MuonHyper& h, int64_t rows, int64_t cols);

// One Muon step on a (rows, cols) fp32 matrix: param and momentum_buffer updated in
// place, grad read (not modified).
void muon_step(float* param, float* momentum_buffer, const float* grad, int64_t rows,
               int64_t cols, const MuonHyper& h, MuonWorkspace& ws);

}  // namespace titan::optim
