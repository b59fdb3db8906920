#include "lanes/builtin/cnn/cnn_random.h"

namespace pipelane::cnn {

std::uint64_t mix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::uint64_t name_key(const std::string& name) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001B3ull;
  return h;
}

double uniform01(std::uint64_t seed, std::uint64_t key, std::uint64_t index) {
  const std::uint64_t h = mix64(mix64(seed ^ key) + index);
  return static_cast<double>(h >> 40) * 0x1p-24;
}

}  // namespace pipelane::cnn
