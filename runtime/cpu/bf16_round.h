// bf16 rounding for the CPU backend's bf16 compute mode (runtime/backend.h, compute precision):
// a float rounded to the nearest bf16 (ties to even) and kept as a float whose low 16 bits are
// zero, so the fp32 kernels run on bf16 values. The product of two such values is exact in fp32
// (8 + 8 significant bits), so an fp32 sum of them is what a bf16 GEMM with fp32 accumulation
// computes, up to the order of the sum.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace pipelane::cpu {

inline float round_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    u |= 0x00400000u;  // NaN stays a (quiet) NaN: rounding its payload could make it infinity
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);
  }
  u &= 0xffff0000u;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The bf16 bits of f rounded as above (a bf16 buffer's element), and a bf16 element widened.
inline std::uint16_t bf16_bits(float f) {
  const float r = round_to_bf16(f);
  std::uint32_t u;
  std::memcpy(&u, &r, sizeof u);
  return static_cast<std::uint16_t>(u >> 16);
}
inline float bf16_value(std::uint16_t bits) {
  const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// A computed value as a buffer of element type T holds it: itself (fp32), or its bf16 bits.
template <typename T>
inline T stored_as(float v) {
  if constexpr (std::is_same_v<T, std::uint16_t>) return bf16_bits(v);
  else return v;
}

// An element of a buffer (fp32, or bf16 bits) as the float it holds.
inline float widened(float v) { return v; }
inline float widened(std::uint16_t bits) { return bf16_value(bits); }

// n elements of a buffer (fp32, or bf16 bits) as floats: an fp32 buffer itself, a bf16 one widened
// into `row`. An fp32 kernel's loops then run on float operands either way: loops that widened as
// they read would be vectorised by their narrowest type, with other reduction orders (other bits).
inline const float* fp32_row(const float* p, float* row, int n) {
  (void)row, (void)n;
  return p;
}
inline const float* fp32_row(const std::uint16_t* p, float* row, int n) {
  for (int i = 0; i < n; ++i) row[i] = bf16_value(p[i]);
  return row;
}

// The operand as the GEMMs see it: itself in fp32, rounded in bf16 compute mode.
template <bool kBf16>
inline float gemm_operand(float x) {
  if constexpr (kBf16) return round_to_bf16(x);
  return x;
}

}  // namespace pipelane::cpu
