// Branch-free exp and tanh that the compiler vectorises (glibc's expf/tanhf are scalar calls:
// they made the softmax over a 50k vocabulary and GeLU the slowest parts of a step).
// exp: Cody-Waite range reduction to r in [-ln2/2, ln2/2], a degree-6 polynomial, then 2^n from
// the exponent bits; relative error below 2e-7 over the range used. Inputs below -87 flush to 0
// (as FTZ would), inputs above 88 saturate.
#pragma once
#include <cstdint>
#include <cstring>

namespace pipelane::cpu {

inline float exp_approx(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float n = __builtin_roundevenf(x * 1.44269504088896341f);
  float r = x - n * 0.693145751953125f;  // ln2 split in two so n*ln2_hi is exact
  r = r - n * 1.428606765330187045e-06f;
  float p = 1.3888889e-3f;
  p = p * r + 8.3333333e-3f;
  p = p * r + 4.1666667e-2f;
  p = p * r + 1.6666667e-1f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

inline float tanh_approx(float x) {
  // tanh(x) = 1 - 2 / (exp(2x) + 1); saturates cleanly for large |x|.
  return 1.0f - 2.0f / (exp_approx(2.0f * x) + 1.0f);
}

}  // namespace pipelane::cpu
