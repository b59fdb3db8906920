// Helpers of the op table's bf16-buffer cases (backend_op_cases_probabilities.cpp,
// backend_op_cases_bf16_activations.cpp): bf16 values made on the host, in and out of a
// DeviceBuffers' allocations, and the bound one rounding to bf16 gives.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "tests/runtime/backend_op_cases.h"

namespace pipelane::backend_ops::bf16_cases {

constexpr double kReduction = 1e-10;  // as backend_op_cases.cpp
// A value rounded once to bf16 is within 2^-8 of itself, relative (bf16's unit roundoff: 8
// significant bits, rounded to nearest), so values rounded so have an NMSE of at most (2^-8)^2
// against the exact ones; 1% on top for fp32's own error. (This was (2^-9)^2, half the unit
// roundoff: a typical rounding, not the worst; SwiGLU's bf16 output on the emulated CUDA backend
// went past it.)
constexpr double kOneBf16Rounding = 0x1p-16 * 1.01;

inline std::uint16_t bf16_bits_of(double x) {  // nearest bf16 of float(x), ties to even (finite x)
  const float f = static_cast<float>(x);
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}
inline double bf16_value(std::uint16_t bits) {
  const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// n bf16 values in a DeviceBuffers' float allocation (its guards after it), and back.
inline std::uint16_t* upload_bf16(DeviceBuffers& b, const std::vector<std::uint16_t>& bits) {
  std::vector<float> packed((bits.size() + 1) / 2, 0.f);
  std::memcpy(packed.data(), bits.data(), bits.size() * sizeof(std::uint16_t));
  return reinterpret_cast<std::uint16_t*>(b.upload(packed));
}
inline std::vector<float> download_bf16(DeviceBuffers& b, const std::uint16_t* device, std::size_t n) {
  const std::vector<float> packed = b.download(reinterpret_cast<const float*>(device), (n + 1) / 2);
  std::vector<std::uint16_t> bits(n);
  std::memcpy(bits.data(), packed.data(), n * sizeof(std::uint16_t));
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(bf16_value(bits[i]));
  return out;
}

inline std::vector<std::uint16_t> rounded_bits(const ref::Vec& p) {
  std::vector<std::uint16_t> bits(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) bits[i] = bf16_bits_of(p[i]);
  return bits;
}
inline ref::Vec widened(const std::vector<std::uint16_t>& bits) {
  ref::Vec p(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) p[i] = bf16_value(bits[i]);
  return p;
}

}  // namespace pipelane::backend_ops::bf16_cases
