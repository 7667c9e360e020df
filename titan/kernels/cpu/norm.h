// RMSNorm and LayerNorm row kernels, forward and backward (raw fp32, no autograd).
//
// Batch invariance (DESIGN.md §1.2): every row is reduced with the one lane scheme of
// isa/reduce.h (4 × W lane accumulators, masked tail, fixed combining tree) and then a
// scalar epilogue, so a row's bits depend only on that row and D. Weight/bias gradients
// are cross-row sums: each fixed block of kNormRowChunk rows (independent of the thread
// count) sums its rows in ascending order into a partial, and the partials are added
// in block-index order, so dw/db have the same bits for any number of threads.
#pragma once
#include <cstdint>

namespace titan::kernels::cpu {

// Rows per weight-gradient partial (fixed: it defines the summation order of dw/db).
inline constexpr int64_t kNormRowChunk = 64;

// RMSNorm (Zhang & Sennrich 2019; HF LlamaRMSNorm):
//   rstd[t] = 1 / sqrt(mean_j(x[t][j]²) + eps),   out[t][j] = w[j] · (x[t][j] · rstd[t]).
// out (T, D), rstd (T) (may be null), x (T, D), w (D) (null: no weight). out may alias x.
// Throws titan::Error for T < 0, D < 1, eps < 0 or not finite, null out/x.
void rms_norm_fwd(float* out, float* rstd, const float* x, const float* w, int64_t T, int64_t D,
                  float eps);

// RMSNorm backward. With g = dout ⊙ w (dout if w is null) and r = rstd[t]:
//   dx[t] = r · g − (r³ / D) · (Σ_j g_j x_j) · x[t]          (overwrites dx; may alias dout)
//   dw[j] (+)= Σ_t dout[t][j] · x[t][j] · r_t                (accumulate_dw: += else =)
// dx (T, D), dw (D) (null: skip; must be null when w is null), dout (T, D), x (T, D),
// w (D) or null, rstd (T) from rms_norm_fwd. Throws titan::Error on bad sizes/pointers.
void rms_norm_bwd(float* dx, float* dw, const float* dout, const float* x, const float* w,
                  const float* rstd, int64_t T, int64_t D, bool accumulate_dw);

// LayerNorm (Ba et al. 2016; torch.nn.functional.layer_norm, biased variance):
//   mean[t] = Σ_j x / D,  rstd[t] = 1 / sqrt(Σ_j (x − mean)² / D + eps),
//   out[t][j] = (x[t][j] − mean[t]) · rstd[t] · w[j] + b[j].
// out (T, D), mean (T) and rstd (T) (each may be null), x (T, D), w (D) and b (D) optional
// (null: 1 and 0). out may alias x. Throws titan::Error on bad sizes/pointers.
void layer_norm_fwd(float* out, float* mean, float* rstd, const float* x, const float* w,
                    const float* b, int64_t T, int64_t D, float eps);

// LayerNorm backward. With x̂ = (x − mean) · rstd and g = dout ⊙ w (dout if w is null):
//   dx[t] = rstd · (g − mean_j(g) − x̂ · mean_j(g ⊙ x̂))        (overwrites dx)
//   dw[j] (+)= Σ_t dout · x̂,   db[j] (+)= Σ_t dout            (accumulate: += else =)
// dx (T, D), dw (D) / db (D) null to skip (dw must be null when w is null), dout (T, D),
// x (T, D), w (D) or null, mean (T), rstd (T) from layer_norm_fwd.
void layer_norm_bwd(float* dx, float* dw, float* db, const float* dout, const float* x,
                    const float* w, const float* mean, const float* rstd, int64_t T, int64_t D,
                    bool accumulate);

}  // namespace titan::kernels::cpu
