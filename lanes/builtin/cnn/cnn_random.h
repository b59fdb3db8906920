// Counter-based random numbers for the CNN lanes: every value is a pure function of a seed, a key
// and an index (splitmix64's finaliser), so weights, synthetic images and dropout masks do not
// depend on the order they are drawn in, a resumed run draws the same ones, and a reference in
// another language (tests/golden/cnn_reference.py) reproduces them bit for bit.
#pragma once
#include <cstdint>
#include <string>

namespace pipelane::cnn {

inline std::uint64_t mix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// FNV-1a of a name: a parameter's key, independent of where it sits in the model.
std::uint64_t name_key(const std::string& name);

// Draw `index` of the stream (seed, key) is uniform01_at(stream_base(seed, key), index): uniform in
// [0, 1) with 24 random bits, exact in float and double. A loop over one stream hashes its key once.
inline std::uint64_t stream_base(std::uint64_t seed, std::uint64_t key) { return mix64(seed ^ key); }
inline double uniform01_at(std::uint64_t base, std::uint64_t index) {
  return static_cast<double>(mix64(base + index) >> 40) * 0x1p-24;
}
inline double uniform01(std::uint64_t seed, std::uint64_t key, std::uint64_t index) {
  return uniform01_at(stream_base(seed, key), index);
}
// Uniform in [-1, 1), exact in double.
inline double uniform_pm1(std::uint64_t seed, std::uint64_t key, std::uint64_t index) {
  return 2.0 * uniform01(seed, key, index) - 1.0;
}

}  // namespace pipelane::cnn
