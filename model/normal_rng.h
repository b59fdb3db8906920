// Deterministic normal samples keyed by (seed, tensor name): splitmix64 + Box-Muller. Platform
// independent (no std::normal_distribution, whose output is implementation-defined).
#pragma once
#include <cmath>
#include <cstdint>
#include <string_view>

namespace pipelane {

class NormalRng {
 public:
  NormalRng(std::uint64_t seed, std::string_view key) : state_(seed ^ 0x9E3779B97F4A7C15ull) {
    for (unsigned char ch : key) state_ = (state_ ^ ch) * 0x100000001B3ull;  // FNV-1a style mix
  }
  std::uint64_t next_u64() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return (static_cast<double>(next_u64() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
  float next() {
    if (have_spare_) {
      have_spare_ = false;
      return spare_;
    }
    const double u1 = uniform(), u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = static_cast<float>(r * std::sin(2.0 * M_PI * u2));
    have_spare_ = true;
    return static_cast<float>(r * std::cos(2.0 * M_PI * u2));
  }

 private:
  std::uint64_t state_;
  float spare_ = 0.f;
  bool have_spare_ = false;
};

}  // namespace pipelane
