// Data types and exact scalar conversions.
// bf16/f16/fp8 conversions round to nearest even (RNE); NaN stays NaN; fp8 e4m3
// follows the OCP FP8 spec (e4m3fn: no infinities, max 448, NaN = S.1111.111;
// e5m2: IEEE-like with inf). Overflow on e4m3 saturates to NaN like PyTorch's
// float8_e4m3fn cast (values > 448 after rounding become NaN); e5m2 overflows to inf.
// Source: OCP 8-bit Floating Point Specification (OFP8) rev 1.0, 2023.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace titan {

enum class DType : uint8_t { f32, bf16, f16, i32, i64, u8, boolean, f8e4m3, f8e5m2 };

constexpr size_t dtype_size(DType d) {
  switch (d) {
    case DType::f32: case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::bf16: case DType::f16: return 2;
    default: return 1;
  }
}
constexpr bool is_floating(DType d) {
  return d == DType::f32 || d == DType::bf16 || d == DType::f16 || d == DType::f8e4m3 ||
         d == DType::f8e5m2;
}
constexpr bool is_integral(DType d) {
  return d == DType::i32 || d == DType::i64 || d == DType::u8 || d == DType::boolean;
}
// "f32", "bf16", ... ; throws titan::Error for unknown names in dtype_from_name.
std::string_view dtype_name(DType d);
DType dtype_from_name(std::string_view name);

inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// ---- bf16: upper 16 bits of f32, RNE.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

// ---- f16 (IEEE binary16), RNE, with subnormals.
uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);

// ---- fp8 storage types (OCP OFP8).
uint8_t f32_to_f8e4m3(float f);
float f8e4m3_to_f32(uint8_t v);
uint8_t f32_to_f8e5m2(float f);
float f8e5m2_to_f32(uint8_t v);

// Reads element i of a buffer of dtype d as double / writes a double (rounded RNE).
double load_as_double(const void* p, DType d, int64_t i);
void store_from_double(void* p, DType d, int64_t i, double v);

}  // namespace titan
