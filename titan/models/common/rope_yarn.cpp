#include "titan/models/common/rope_yarn.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "titan/core/error.h"

namespace titan::models {

double yarn_get_mscale(double scale, double m) { return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; }

double yarn_attention_factor(const RopeScaling& s) {
  if (s.mscale != 0.0 && s.mscale_all_dim != 0.0)
    return yarn_get_mscale(s.factor, s.mscale) / yarn_get_mscale(s.factor, s.mscale_all_dim);
  return yarn_get_mscale(s.factor);
}

double yarn_softmax_scale_factor(const RopeScaling& s) {
  if (s.mscale_all_dim == 0.0) return 1.0;
  const double m = yarn_get_mscale(s.factor, s.mscale_all_dim);
  return m * m;
}

RopeCache yarn_rope_tables(int64_t P, int64_t R, double theta, const RopeScaling& s) {
  TITAN_CHECK(s.factor > 0, "model config: rope_scaling.factor of rope_type yarn must be > 0, got {}", s.factor);
  TITAN_CHECK(s.beta_fast >= s.beta_slow && s.beta_slow > 0,
              "model config: rope_scaling of rope_type yarn needs beta_fast >= beta_slow > 0, got {} and {}",
              s.beta_fast, s.beta_slow);
  TITAN_CHECK(s.original_max_position_embeddings > 0,
              "model config: rope_scaling.original_max_position_embeddings must be > 0, got {}",
              s.original_max_position_embeddings);
  TITAN_CHECK(R >= 2 && R % 2 == 0 && P >= 0, "yarn_rope_tables: R = {} must be even >= 2, P = {} >= 0", R, P);
  const double dim = static_cast<double>(R);
  const double omax = static_cast<double>(s.original_max_position_embeddings);
  // The dim index at which a wavelength completes `rot` rotations over omax positions.
  auto correction_dim = [&](double rot) {
    return dim * std::log(omax / (rot * 2.0 * std::numbers::pi)) / (2.0 * std::log(theta));
  };
  const double lo = correction_dim(s.beta_fast), hi = correction_dim(s.beta_slow);
  const double low = std::max(s.truncate ? std::floor(lo) : lo, 0.0);
  double high = std::min(s.truncate ? std::ceil(hi) : hi, dim - 1.0);
  if (low == high) high += 0.001;
  const int64_t h = R / 2;
  std::vector<double> inv(static_cast<size_t>(h));
  for (int64_t i = 0; i < h; ++i) {
    const double pos_freq = std::pow(theta, static_cast<double>(2 * i) / dim);
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation = 1.0 - ramp;  // weight of the unscaled frequency
    inv[static_cast<size_t>(i)] =
        (1.0 / (s.factor * pos_freq)) * (1.0 - extrapolation) + (1.0 / pos_freq) * extrapolation;
  }
  const double af = yarn_attention_factor(s);
  RopeCache c;
  c.rotary_dim = R;
  c.cos = Tensor::empty({P, h});
  c.sin = Tensor::empty({P, h});
  float* cp = c.cos.data<float>();
  float* sp = c.sin.data<float>();
  for (int64_t p = 0; p < P; ++p)
    for (int64_t i = 0; i < h; ++i) {
      const double a = static_cast<double>(p) * inv[static_cast<size_t>(i)];
      cp[p * h + i] = static_cast<float>(std::cos(a) * af);
      sp[p * h + i] = static_cast<float>(std::sin(a) * af);
    }
  return c;
}

}  // namespace titan::models
