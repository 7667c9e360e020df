// Philox 4x32-10 counter-based RNG (Salmon et al., "Parallel Random Numbers: As
// Easy as 1, 2, 3", SC'11; constants as in Random123 and PyTorch's
// at::PhiloxCudaState). A draw depends only on (key, counter), never on call order,
// so samples for one request or one tensor element do not depend on neighbours.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>

namespace titan {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

inline PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
  constexpr uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = static_cast<uint64_t>(M0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(M1) * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
    k[0] += W0;
    k[1] += W1;
  }
  return c;
}

inline PhiloxKey philox_key(uint64_t seed) {
  return {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
}

// Four 32-bit draws for (seed, offset, stream): counter = (offset lo, offset hi, stream lo, stream hi).
inline PhiloxCounter philox_draw(uint64_t seed, uint64_t offset, uint64_t stream = 0) {
  return philox4x32_10({static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32),
                        static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)},
                       philox_key(seed));
}

// Uniform float in [0, 1) with 24 random bits.
inline float uint_to_unit_float(uint32_t u) { return static_cast<float>(u >> 8) * (1.0f / 16777216.0f); }

// Standard normal from two uniforms by Box–Muller (double precision, rounded to f32).
inline float box_muller(uint32_t a, uint32_t b) {
  const double u1 = (static_cast<double>(a >> 8) + 1.0) / 16777217.0;  // (0, 1]
  const double u2 = static_cast<double>(b >> 8) / 16777216.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

}  // namespace titan
