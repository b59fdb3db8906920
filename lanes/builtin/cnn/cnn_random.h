// Counter-based random numbers for the CNN lanes: every value is a pure function of a seed, a key
// and an index (splitmix64's finaliser), so weights, synthetic images and dropout masks do not
// depend on the order they are drawn in, a resumed run draws the same ones, and a reference in
// another language (tests/golden/cnn_reference.py) reproduces them bit for bit.
#pragma once
#include <cstdint>
#include <string>

namespace pipelane::cnn {

std::uint64_t mix64(std::uint64_t z);
// FNV-1a of a name: a parameter's key, independent of where it sits in the model.
std::uint64_t name_key(const std::string& name);
// Uniform in [0, 1) with 24 random bits: exact in float and double.
double uniform01(std::uint64_t seed, std::uint64_t key, std::uint64_t index);
// Uniform in [-1, 1), exact in double.
inline double uniform_pm1(std::uint64_t seed, std::uint64_t key, std::uint64_t index) {
  return 2.0 * uniform01(seed, key, index) - 1.0;
}

}  // namespace pipelane::cnn
