// The bf16-storage casts as backend op cases: the ops whose buffers are bf16 (supports(op, BF16)).
// The reference rounds in double, independently of the backends' bit tricks: the two bf16
// neighbours of x (its truncation and the next one up in magnitude) and the nearer of them, the
// one with an even last bit on a tie. Inputs: random normal values, exact ties (odd and even),
// values just above and below a tie, signed zeros and the largest values that stay finite.
#include <cmath>
#include <cstring>

#include "tests/runtime/backend_op_cases.h"

namespace pipelane::backend_ops {

namespace {
// Every output is one input's exact image (no arithmetic beyond the rounding): bit-exact.
constexpr double kExact = 1e-13;

std::uint32_t bits_of(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
float float_of(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// The nearest bf16 of a finite x, ties to even, in double.
double reference_bf16(float x) {
  const std::uint32_t u = bits_of(x);
  const std::uint32_t low = u & 0xffff0000u, high = low + 0x10000u;  // toward zero; away from zero
  const double a = float_of(low), b = float_of(high), v = x;
  const double da = std::fabs(v - a), db = std::fabs(b - v);
  if (da < db) return a;
  if (db < da) return b;
  return ((low >> 16) & 1u) == 0 ? a : b;
}

std::vector<float> storage_inputs(std::mt19937& rng, std::size_t n) {
  std::normal_distribution<float> normal(0.f, 3.f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  const std::uint32_t special[] = {
      0x3f808000u,  // a tie, even last kept bit: down
      0x3f818000u,  // a tie, odd: up
      0xbf818000u,  // the same, negative
      0x3f807fffu,  // just below a tie
      0x3f808001u,  // just above
      0x00000000u, 0x80000000u,  // signed zeros
      0x7f7f0000u,  // the largest finite bf16
      0x7f7f7fffu,  // rounds down to it
      0x3f7fffffu,  // rounds up to 1.0 (carry into the exponent)
  };
  for (std::size_t i = 0; i < std::size(special) && i + 1 < n; ++i) x[i + 1] = float_of(special[i]);
  return x;
}

// A bf16 buffer of n values in a DeviceBuffers' float allocation (guards after it).
std::uint16_t* bf16_buffer(DeviceBuffers& b, std::size_t n) {
  return reinterpret_cast<std::uint16_t*>(b.zeros((n + 1) / 2));
}
std::vector<float> widen(const std::vector<float>& packed, std::size_t n) {
  std::vector<std::uint16_t> h(n);
  std::memcpy(h.data(), packed.data(), n * sizeof(std::uint16_t));
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = float_of(static_cast<std::uint32_t>(h[i]) << 16);
  return out;
}
}  // namespace

void add_bf16_storage_cases(std::vector<OpCase>& cases, std::mt19937& rng) {
  for (const std::size_t n : {std::size_t{37}, std::size_t{4099}}) {
    const std::string tag = " (bf16 buffer, n=" + std::to_string(n) + ")";
    const std::vector<float> x = storage_inputs(rng, n);
    const auto expected = [x] {
      ref::Vec out(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) out[i] = reference_bf16(x[i]);
      return Expected{{"out", out}};
    };
    cases.push_back({OpKind::CastToBf16, "cast_to_bf16" + tag, kExact,
                     [=](DeviceBuffers& b, bool poison) {
                       std::uint16_t* out = bf16_buffer(b, n);
                       b.backend().cast_to_bf16(out, b.upload(poisoned_first(x, poison)), n, b.stream());
                       return Outputs{{"out", widen(b.download(reinterpret_cast<float*>(out), (n + 1) / 2), n)}};
                     },
                     expected});
    cases.push_back({OpKind::RoundToBf16, "round_to_bf16" + tag, kExact,
                     [=](DeviceBuffers& b, bool poison) {
                       float* v = b.upload(poisoned_first(x, poison));
                       b.backend().round_to_bf16(v, n, b.stream());
                       return Outputs{{"out", b.download(v, n)}};
                     },
                     expected});
    // Back to fp32: the bf16 values of x (rounded on the host), widened exactly.
    std::vector<float> rounded(n);
    for (std::size_t i = 0; i < n; ++i) rounded[i] = static_cast<float>(reference_bf16(x[i]));
    cases.push_back({OpKind::CastFromBf16, "cast_from_bf16" + tag, kExact,
                     [=](DeviceBuffers& b, bool poison) {
                       const std::vector<float> in = poisoned_first(rounded, poison);
                       std::vector<float> packed((n + 1) / 2, 0.f);
                       auto* h = reinterpret_cast<std::uint16_t*>(packed.data());
                       for (std::size_t i = 0; i < n; ++i) h[i] = static_cast<std::uint16_t>(bits_of(in[i]) >> 16);
                       float* out = b.zeros(n);
                       b.backend().cast_from_bf16(out, reinterpret_cast<const std::uint16_t*>(b.upload(packed)), n,
                                                  b.stream());
                       return Outputs{{"out", b.download(out, n)}};
                     },
                     [rounded] { return Expected{{"out", ref::to_double(rounded)}}; }});
  }
}

}  // namespace pipelane::backend_ops
