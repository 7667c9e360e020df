// RoPE cache (double precision, scalar) and the entry points of its application:
// argument validation and run-time ISA dispatch.
#include "titan/kernels/cpu/rope.h"

#include <cmath>
#include <numbers>
#include <vector>

#include "titan/core/error.h"
#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/dispatch.h"

TITAN_DECLARE_ISA(void, rope_apply_qk,
                  (float* q_out, float* k_out, const float* q, const float* k,
                   const int64_t* positions, const float* cos, const float* sin, int64_t T,
                   int64_t H, int64_t Hkv, int64_t Dh, int64_t R,
                   titan::kernels::cpu::RopeStyle style, bool inverse))

namespace titan::kernels::cpu {

namespace {
void check_rotary(const char* fn, int64_t R) {
  TITAN_CHECK(R >= 2 && R % 2 == 0, "{}: rotary dims R must be even and >= 2, got {}", fn, R);
}
void check_ptr(const char* fn, const char* name, const void* p) {
  TITAN_CHECK(p != nullptr, "{}: {} must not be null", fn, name);
}
}  // namespace

void rope_inv_freq(double* out, int64_t R, double theta, const RopeScaling& sc) {
  constexpr const char* fn = "rope_inv_freq";
  check_rotary(fn, R);
  check_ptr(fn, "out", out);
  TITAN_CHECK(std::isfinite(theta) && theta > 0.0, "{}: theta must be finite and > 0, got {}",
              fn, theta);
  const bool l3 = sc.kind == RopeScaling::Kind::llama3;
  if (l3) {
    TITAN_CHECK(sc.factor > 0.0, "{}: llama3 factor must be > 0, got {}", fn, sc.factor);
    TITAN_CHECK(sc.low_freq_factor > 0.0 && sc.high_freq_factor >= sc.low_freq_factor,
                "{}: llama3 needs 0 < low_freq_factor <= high_freq_factor, got {} and {}", fn,
                sc.low_freq_factor, sc.high_freq_factor);
    TITAN_CHECK(sc.original_max_position_embeddings >= 1,
                "{}: llama3 original_max_position_embeddings must be >= 1, got {}", fn,
                sc.original_max_position_embeddings);
  }
  const double old_len = static_cast<double>(sc.original_max_position_embeddings);
  const double low_wavelen = old_len / sc.low_freq_factor;
  const double high_wavelen = old_len / sc.high_freq_factor;
  for (int64_t i = 0; i < R / 2; ++i) {
    double f = 1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(R));
    if (l3) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen < high_wavelen) {
        // high frequency: unchanged
      } else if (wavelen > low_wavelen || sc.high_freq_factor == sc.low_freq_factor) {
        // (equal factors, Llama 4 Scout: no interpolated band; wavelen == the bound is scaled)
        f = f / sc.factor;
      } else {
        const double smooth =
            (old_len / wavelen - sc.low_freq_factor) / (sc.high_freq_factor - sc.low_freq_factor);
        f = (1.0 - smooth) * f / sc.factor + smooth * f;
      }
    }
    out[i] = f;
  }
}

void rope_cache(float* cos, float* sin, int64_t P, int64_t R, double theta,
                const RopeScaling& scaling) {
  constexpr const char* fn = "rope_cache";
  TITAN_CHECK(P >= 0, "{}: P must be >= 0, got {}", fn, P);
  check_rotary(fn, R);
  if (P > 0) {
    check_ptr(fn, "cos", cos);
    check_ptr(fn, "sin", sin);
  }
  const int64_t h = R / 2;
  std::vector<double> inv(static_cast<size_t>(h));
  rope_inv_freq(inv.data(), R, theta, scaling);
  parallel_for_grain(P, 64, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      for (int64_t i = 0; i < h; ++i) {
        const double a = static_cast<double>(p) * inv[i];
        cos[p * h + i] = static_cast<float>(std::cos(a));
        sin[p * h + i] = static_cast<float>(std::sin(a));
      }
  });
}

namespace {
void check_apply(const char* fn, const float* cos, const float* sin, const int64_t* positions,
                 int64_t T, int64_t Dh, int64_t R, int64_t P) {
  TITAN_CHECK(T >= 0, "{}: T must be >= 0, got {}", fn, T);
  check_rotary(fn, R);
  TITAN_CHECK(R <= Dh, "{}: rotary dims R = {} exceed head dim Dh = {}", fn, R, Dh);
  TITAN_CHECK(P >= 1, "{}: cache positions P must be >= 1, got {}", fn, P);
  if (T == 0) return;
  check_ptr(fn, "cos", cos);
  check_ptr(fn, "sin", sin);
  check_ptr(fn, "positions", positions);
  for (int64_t t = 0; t < T; ++t)
    TITAN_CHECK(positions[t] >= 0 && positions[t] < P,
                "{}: positions[{}] = {} is outside the cache [0, P = {})", fn, t, positions[t], P);
}
template <typename I>
std::vector<int64_t> widen(const I* p, int64_t T) {
  TITAN_CHECK(p != nullptr || T <= 0, "rope_apply: positions must not be null");
  return std::vector<int64_t>(p, p + (T > 0 ? T : 0));
}
}  // namespace

void rope_apply(float* out, const float* x, const int64_t* positions, const float* cos,
                const float* sin, int64_t T, int64_t Hx, int64_t Dh, int64_t R, int64_t P,
                RopeStyle style, bool inverse) {
  constexpr const char* fn = "rope_apply";
  check_apply(fn, cos, sin, positions, T, Dh, R, P);
  TITAN_CHECK(Hx >= 0, "{}: Hx must be >= 0, got {}", fn, Hx);
  if (T == 0 || Hx == 0) return;
  check_ptr(fn, "out", out);
  check_ptr(fn, "x", x);
  TITAN_DISPATCH(rope_apply_qk, out, nullptr, x, nullptr, positions, cos, sin, T, Hx, 0, Dh, R,
                 style, inverse);
}

void rope_apply(float* out, const float* x, const int32_t* positions, const float* cos,
                const float* sin, int64_t T, int64_t Hx, int64_t Dh, int64_t R, int64_t P,
                RopeStyle style, bool inverse) {
  const auto p64 = widen(positions, T);
  rope_apply(out, x, p64.data(), cos, sin, T, Hx, Dh, R, P, style, inverse);
}

void rope_apply_qk(float* q_out, float* k_out, const float* q, const float* k,
                   const int64_t* positions, const float* cos, const float* sin, int64_t T,
                   int64_t H, int64_t Hkv, int64_t Dh, int64_t R, int64_t P, RopeStyle style,
                   bool inverse) {
  constexpr const char* fn = "rope_apply_qk";
  check_apply(fn, cos, sin, positions, T, Dh, R, P);
  TITAN_CHECK(H >= 0 && Hkv >= 0, "{}: H and Hkv must be >= 0, got {} and {}", fn, H, Hkv);
  if (T == 0) return;
  if (H > 0) {
    check_ptr(fn, "q_out", q_out);
    check_ptr(fn, "q", q);
  }
  if (Hkv > 0) {
    check_ptr(fn, "k_out", k_out);
    check_ptr(fn, "k", k);
  }
  TITAN_DISPATCH(rope_apply_qk, q_out, k_out, q, k, positions, cos, sin, T, H, Hkv, Dh, R, style,
                 inverse);
}

void rope_apply_qk(float* q_out, float* k_out, const float* q, const float* k,
                   const int32_t* positions, const float* cos, const float* sin, int64_t T,
                   int64_t H, int64_t Hkv, int64_t Dh, int64_t R, int64_t P, RopeStyle style,
                   bool inverse) {
  const auto p64 = widen(positions, T);
  rope_apply_qk(q_out, k_out, q, k, p64.data(), cos, sin, T, H, Hkv, Dh, R, P, style, inverse);
}

}  // namespace titan::kernels::cpu
