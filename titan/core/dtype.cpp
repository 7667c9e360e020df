#include "titan/core/dtype.h"

#include <cmath>
#include <limits>

#include "titan/core/error.h"

namespace titan {

std::string_view dtype_name(DType d) {
  switch (d) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
    case DType::boolean: return "bool";
    case DType::f8e4m3: return "f8e4m3";
    case DType::f8e5m2: return "f8e5m2";
  }
  return "?";
}

DType dtype_from_name(std::string_view n) {
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u8,
                  DType::boolean, DType::f8e4m3, DType::f8e5m2})
    if (dtype_name(d) == n) return d;
  if (n == "fp32" || n == "float32") return DType::f32;
  if (n == "float16" || n == "fp16") return DType::f16;
  if (n == "bfloat16") return DType::bf16;
  fail("unknown dtype '{}' (expected one of f32, bf16, f16, i32, i64, u8, bool, f8e4m3, f8e5m2)", n);
}

namespace {

// A small binary float format: 1 sign bit, E exponent bits, M mantissa bits.
struct SmallFloat {
  int ebits, mbits, bias;
  bool has_inf;       // IEEE-style inf/NaN in the top exponent (f16, e5m2)
  double max_finite;  // largest finite magnitude
  uint32_t nan_code;  // positive quiet NaN code
};

constexpr SmallFloat kF16{5, 10, 15, true, 65504.0, 0x7e00};
constexpr SmallFloat kE5M2{5, 2, 15, true, 57344.0, 0x7f};
constexpr SmallFloat kE4M3{4, 3, 7, false, 448.0, 0x7f};

// Round-to-nearest-even of a float to the format. All values involved are dyadic
// rationals that double holds exactly, so the result is the exact RNE rounding.
uint32_t encode(float f, const SmallFloat& s) {
  const uint32_t sign = (f32_bits(f) >> 31) << (s.ebits + s.mbits);
  if (std::isnan(f)) return sign | s.nan_code;
  const uint32_t inf_code = ((1u << s.ebits) - 1) << s.mbits;
  double a = std::fabs(static_cast<double>(f));
  if (std::isinf(a)) return sign | (s.has_inf ? inf_code : s.nan_code);
  if (a == 0.0) return sign;
  const int emin = 1 - s.bias;
  int e = std::max(std::ilogb(a), emin);
  double q = std::ldexp(1.0, e - s.mbits);
  double r = std::nearbyint(a / q) * q;  // default rounding mode: ties to even
  if (r > s.max_finite) return sign | (s.has_inf ? inf_code : s.nan_code);
  if (r == 0.0) return sign;
  int er = std::ilogb(r);
  if (er < emin) return sign | static_cast<uint32_t>(std::ldexp(r, -(emin - s.mbits)));
  uint32_t mant = static_cast<uint32_t>(std::ldexp(r, -(er - s.mbits))) - (1u << s.mbits);
  return sign | (static_cast<uint32_t>(er + s.bias) << s.mbits) | mant;
}

float decode(uint32_t v, const SmallFloat& s) {
  const int nb = s.ebits + s.mbits;
  const bool neg = (v >> nb) & 1u;
  const uint32_t ex = (v >> s.mbits) & ((1u << s.ebits) - 1);
  const uint32_t mant = v & ((1u << s.mbits) - 1);
  double r;
  if (s.has_inf && ex == (1u << s.ebits) - 1) {
    r = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (!s.has_inf && ex == (1u << s.ebits) - 1 && mant == (1u << s.mbits) - 1) {
    r = std::numeric_limits<double>::quiet_NaN();
  } else if (ex == 0) {
    r = std::ldexp(static_cast<double>(mant), 1 - s.bias - s.mbits);
  } else {
    r = std::ldexp(static_cast<double>(mant | (1u << s.mbits)), static_cast<int>(ex) - s.bias - s.mbits);
  }
  return static_cast<float>(neg ? -r : r);
}

}  // namespace

uint16_t f32_to_f16(float f) { return static_cast<uint16_t>(encode(f, kF16)); }
float f16_to_f32(uint16_t h) { return decode(h, kF16); }
uint8_t f32_to_f8e4m3(float f) { return static_cast<uint8_t>(encode(f, kE4M3)); }
float f8e4m3_to_f32(uint8_t v) { return decode(v, kE4M3); }
uint8_t f32_to_f8e5m2(float f) { return static_cast<uint8_t>(encode(f, kE5M2)); }
float f8e5m2_to_f32(uint8_t v) { return decode(v, kE5M2); }

double load_as_double(const void* p, DType d, int64_t i) {
  switch (d) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::i32: return static_cast<const int32_t*>(p)[i];
    case DType::i64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::u8: return static_cast<const uint8_t*>(p)[i];
    case DType::boolean: return static_cast<const uint8_t*>(p)[i] ? 1.0 : 0.0;
    case DType::f8e4m3: return f8e4m3_to_f32(static_cast<const uint8_t*>(p)[i]);
    case DType::f8e5m2: return f8e5m2_to_f32(static_cast<const uint8_t*>(p)[i]);
  }
  return 0;
}

void store_from_double(void* p, DType d, int64_t i, double v) {
  switch (d) {
    case DType::f32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::bf16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(static_cast<float>(v)); break;
    case DType::f16: static_cast<uint16_t*>(p)[i] = f32_to_f16(static_cast<float>(v)); break;
    case DType::i32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::i64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DType::u8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case DType::boolean: static_cast<uint8_t*>(p)[i] = v != 0.0; break;
    case DType::f8e4m3: static_cast<uint8_t*>(p)[i] = f32_to_f8e4m3(static_cast<float>(v)); break;
    case DType::f8e5m2: static_cast<uint8_t*>(p)[i] = f32_to_f8e5m2(static_cast<float>(v)); break;
  }
}

}  // namespace titan
