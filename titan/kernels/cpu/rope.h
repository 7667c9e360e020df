// Rotary position embedding (RoPE; Su et al. 2021, "RoFormer"): the cos/sin cache and
// its application to q/k, gathered by a positions tensor so packed training batches and
// decode steps read the same table entries (notes/batch-invariance.md, "RoPE").
// Every output element is computed by the same few fp32 operations (no FMA: the
// products are rounded, then added, exactly like PyTorch's q·cos + rotate_half(q)·sin),
// whatever the row count or position.
#pragma once
#include <cstdint>

namespace titan::kernels::cpu {

// Frequency scaling of the cache (HF transformers rope_scaling).
struct RopeScaling {
  enum class Kind { none, llama3 };
  Kind kind = Kind::none;
  // llama3 (HF _compute_llama3_parameters): wavelengths longer than
  // original_max_position_embeddings / low_freq_factor are divided by `factor`, shorter
  // than .../high_freq_factor are kept, and the band between is interpolated smoothly.
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

// How the R rotary dims of a head are paired.
enum class RopeStyle {
  rotate_half,  // Llama / HF / GPT-NeoX: dim i pairs with dim i + R/2
  interleaved,  // GPT-J / Meta original: dim 2i pairs with dim 2i + 1
};

// The inverse frequencies inv_freq[i] = theta^(−2i/R), i < R/2, after `scaling`
// (double precision). out (R/2). Throws titan::Error on bad R / theta / scaling.
void rope_inv_freq(double* out, int64_t R, double theta, const RopeScaling& scaling);

// cos (P, R/2), sin (P, R/2): cos/sin(p · inv_freq[i]) for positions p < P, computed in
// double and rounded to fp32. R = rotary dims (even, >= 2). Throws titan::Error for
// P < 0, R odd or < 2, theta not finite or <= 0, or bad scaling values.
void rope_cache(float* cos, float* sin, int64_t P, int64_t R, double theta,
                const RopeScaling& scaling = {});

// Applies RoPE to x (T, Hx, Dh) for token t at position positions[t] (gathers row
// positions[t] of cos/sin (P, R/2)); the first R dims of each head are rotated, dims
// [R, Dh) are copied unchanged (partial rotary). With rotate_half and c, s the cache
// entries of pair i:
//   out[i] = x[i]·c − x[i+R/2]·s,   out[i+R/2] = x[i+R/2]·c + x[i]·s
// (interleaved: the same with the pair (2i, 2i+1)). inverse = true rotates by −angle
// (s → −s): the backward pass (dx from dout) and the exact inverse.
// out may equal x (in place); otherwise they must not overlap.
// positions (T) int64 or int32 in [0, P). Throws titan::Error on bad sizes, R > Dh,
// R odd, or a position outside [0, P).
void rope_apply(float* out, const float* x, const int64_t* positions, const float* cos,
                const float* sin, int64_t T, int64_t Hx, int64_t Dh, int64_t R, int64_t P,
                RopeStyle style, bool inverse);
void rope_apply(float* out, const float* x, const int32_t* positions, const float* cos,
                const float* sin, int64_t T, int64_t Hx, int64_t Dh, int64_t R, int64_t P,
                RopeStyle style, bool inverse);

// rope_apply on q (T, H, Dh) and k (T, Hkv, Dh) in one pass over the tokens (each
// token's cos/sin row is read once for all H + Hkv heads); same bits as two
// rope_apply calls. q_out / k_out may equal q / k.
void rope_apply_qk(float* q_out, float* k_out, const float* q, const float* k,
                   const int64_t* positions, const float* cos, const float* sin, int64_t T,
                   int64_t H, int64_t Hkv, int64_t Dh, int64_t R, int64_t P, RopeStyle style,
                   bool inverse);
void rope_apply_qk(float* q_out, float* k_out, const float* q, const float* k,
                   const int32_t* positions, const float* cos, const float* sin, int64_t T,
                   int64_t H, int64_t Hkv, int64_t Dh, int64_t R, int64_t P, RopeStyle style,
                   bool inverse);

}  // namespace titan::kernels::cpu
