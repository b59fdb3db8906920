// The R-MAT graph generator of the graph lanes (Graph500's parameters a=0.57 b=0.19 c=0.19
// d=0.05, no label permutation, duplicates and self loops kept): deterministic for a seed, so a
// lane's graph is the same on every rank and every run.
#pragma once
#include <cstdint>

namespace pipelane {

// Calls emit(src, dst) for edge_factor * 2^scale edges.
template <typename Emit>
void for_each_rmat_edge(int scale, std::int64_t edge_factor, std::uint64_t seed, Emit&& emit) {
  std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  auto next = [&s]() {  // splitmix64
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  const std::uint64_t edges = static_cast<std::uint64_t>(edge_factor) << scale;
  // Quadrant thresholds on 32-bit uniforms: a=0.57, a+b=0.76, a+b+c=0.95.
  constexpr std::uint64_t ta = 2448131358ull, tab = 3264175145ull, tabc = 4080218931ull;
  for (std::uint64_t e = 0; e < edges; ++e) {
    std::uint32_t src = 0, dst = 0;
    for (int bit = scale - 1; bit >= 0;) {
      std::uint64_t r = next();
      for (int half = 0; half < 2 && bit >= 0; ++half, --bit, r >>= 32) {
        const std::uint64_t u = r & 0xFFFFFFFFull;
        if (u < ta) {
        } else if (u < tab) {
          dst |= 1u << bit;
        } else if (u < tabc) {
          src |= 1u << bit;
        } else {
          src |= 1u << bit;
          dst |= 1u << bit;
        }
      }
    }
    emit(src, dst);
  }
}

}  // namespace pipelane
