// Gardenia's SGD over a run of edges, serially: the definition of Backend::graphsgd_step's
// update and RMSE passes (runtime/backend.h), which the CPU backend's op and the graphsgd lane's
// host loop (a lane in host memory, with no backend op to call) both are, so both give the same
// bits. Serial reference code, not a kernel: the one place outside a backend that lanes may share
// (tests/runtime/check_backend_boundary.sh allows this header and graph_step_finish.h). Every
// multiply-add is an explicit fma: with -ffp-contract=fast (GCC's default) the compiler would
// otherwise choose which products to fuse, and choose differently where it vectorises a loop
// (the update) than where it does not, so two inlined copies could differ in the last bit. The
// CUDA kernel (kernels/graphsgd.cuh) spells the update the same way; only its dot product's
// order differs.
#pragma once
#include <cmath>
#include <cstdint>

namespace pipelane::graphsgd_edges {

inline float graphsgd_estimate(const float* p, const float* q, int K) {
  float dot = 0.0f;
  for (int k = 0; k < K; ++k) dot = std::fma(p[k], q[k], dot);
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
      p[k] = std::fma(step, std::fma(err, qk, -(lambda * pk)), pk);  // pk + step * (err * qk - lambda * pk)
      q[k] = std::fma(step, std::fma(err, pk, -(lambda * qk)), qk);
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

}  // namespace pipelane::graphsgd_edges
