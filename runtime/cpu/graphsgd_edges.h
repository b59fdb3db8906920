// Gardenia's SGD over a run of edges, serially: the graphsgd lane's host loop and the CPU
// backend's Backend::graphsgd_step are these two functions, so both give the same bits.
#pragma once
#include <cstdint>

namespace pipelane::cpu {

inline float graphsgd_estimate(const float* p, const float* q, int K) {
  float dot = 0.0f;
  for (int k = 0; k < K; ++k) dot += p[k] * q[k];
  return dot;
}

// Edges [begin, end) of one row (user vector p), in order.
inline void graphsgd_update_edges(float* p, float* item, const std::uint32_t* items, const float* ratings,
                                  std::uint64_t begin, std::uint64_t end, int K, float step, float lambda) {
  for (std::uint64_t e = begin; e < end; ++e) {
    float* q = item + static_cast<std::uint64_t>(items[e]) * K;
    const float err = ratings[e] - graphsgd_estimate(p, q, K);
    for (int k = 0; k < K; ++k) {
      const float pk = p[k], qk = q[k];
      p[k] = pk + step * (err * qk - lambda * pk);
      q[k] = qk + step * (err * pk - lambda * qk);
    }
  }
}

// Returns sum + the squared errors of edges [begin, end) of one row, added in order in double.
inline double graphsgd_measure_edges(const float* p, const float* item, const std::uint32_t* items,
                                     const float* ratings, std::uint64_t begin, std::uint64_t end, int K,
                                     double sum) {
  for (std::uint64_t e = begin; e < end; ++e) {
    const float err = ratings[e] - graphsgd_estimate(p, item + static_cast<std::uint64_t>(items[e]) * K, K);
    sum += static_cast<double>(err) * static_cast<double>(err);
  }
  return sum;
}

}  // namespace pipelane::cpu
