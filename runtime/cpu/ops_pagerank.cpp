// PageRank's bounded step (Backend::pagerank_step, runtime/backend.h): the same per-vertex
// arithmetic and the same partition of the slice sums as the CUDA kernel
// (runtime/cuda/kernels/pagerank.cuh), so both give the same bits.
#include <cmath>

#include "runtime/cpu/cpu_ops.h"

namespace pipelane::cpu {

void pagerank_step(const PagerankStep& a) {
  PagerankState& state = *a.state;
  if (state.done != 0 || a.v_end <= a.v_begin) return;
  const float base = state.base;
#pragma omp parallel for schedule(static)
  for (std::int64_t i = a.v_begin; i < static_cast<std::int64_t>(a.v_end); ++i) {
    const auto v = static_cast<std::size_t>(i);
    float acc = 0.0f;
    for (std::uint64_t e = a.offsets[v]; e < a.offsets[v + 1]; ++e) acc += a.contrib_in[a.sources[e]];
    const float r = std::fmaf(a.damping, acc, base);
    a.rank_out[v] = r;
    a.contrib_out[v] = a.out_degree[v] == 0 ? 0.0f : r / static_cast<float>(a.out_degree[v]);
    a.delta[v] = std::fabs(r - a.rank_in[v]);
  }
  // The slice sums over the fixed partition the kernel's block uses (one lane per thread).
  double residual[kPagerankSumLanes], dangling[kPagerankSumLanes];
#pragma omp parallel for schedule(static)
  for (int t = 0; t < kPagerankSumLanes; ++t) {
    double r = 0.0, d = 0.0;
    for (std::size_t v = a.v_begin + static_cast<std::size_t>(t); v < a.v_end; v += kPagerankSumLanes) {
      r += a.delta[v];
      if (a.out_degree[v] == 0) d += a.rank_out[v];
    }
    residual[t] = r;
    dangling[t] = d;
  }
  for (int h = kPagerankSumLanes / 2; h > 0; h /= 2)
    for (int t = 0; t < h; ++t) {
      residual[t] += residual[t + h];
      dangling[t] += dangling[t + h];
    }
  state.residual_sum += residual[0];
  state.dangling_sum += dangling[0];
  state.edges += a.offsets[a.v_end] - a.offsets[a.v_begin];
  if (a.v_end == a.vertices) {  // the iteration's last slice
    const double n = static_cast<double>(a.vertices), d = static_cast<double>(a.damping);
    state.residual = state.residual_sum;
    state.iterations += 1;
    state.base = static_cast<float>(std::fma(d, state.dangling_sum / n, (1.0 - d) / n));
    state.residual_sum = state.dangling_sum = 0.0;
    state.done = state.residual < a.tolerance || state.iterations >= a.max_iterations ? 1u : 0u;
  }
}

}  // namespace pipelane::cpu
