// PageRank's bounded step (Backend::pagerank_step, runtime/backend.h, where the semantics are):
// a pull over a slice of destination vertices of a CSR by destination, one thread per vertex, its
// in-edges summed in CSR order, then one block sums the slice's deltas and dangling ranks over the
// fixed partition backend.h names (kPagerankSumLanes threads, each a fixed stride, then a fixed
// pairwise tree in shared memory) and, on the iteration's last slice, finishes the iteration in
// `state`. No float atomics and no sum that depends on the grid: the result does not depend on the
// block order or the device, and equals the CPU backend's loop (runtime/cpu/ops_pagerank.cpp) bit
// for bit (the update is an explicit fused multiply-add, which both sides round once).
#pragma once
#include <type_traits>

#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/kernels/launch.cuh"

namespace pipelane::cuda {

constexpr int kPagerankThreads = 256;

static __global__ void pagerank_vertices_kernel(PagerankStep a) {
  if (a.state->done != 0) return;  // converged: every later step is a no-op
  const float base = a.state->base;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t v = a.v_begin + static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < a.v_end;
       v += stride) {
    float acc = 0.0f;
    for (std::uint64_t e = a.offsets[v]; e < a.offsets[v + 1]; ++e) acc += a.contrib_in[a.sources[e]];
    const float r = fmaf(a.damping, acc, base);
    a.rank_out[v] = r;
    a.contrib_out[v] = a.out_degree[v] == 0 ? 0.0f : r / static_cast<float>(a.out_degree[v]);
    a.delta[v] = fabsf(r - a.rank_in[v]);
  }
}

// One block of kPagerankSumLanes threads.
static __global__ void pagerank_sums_kernel(PagerankStep a) {
  __shared__ double residual[kPagerankSumLanes];
  __shared__ double dangling[kPagerankSumLanes];
  const bool done = a.state->done != 0;  // read by every thread before thread 0 may write it
  const int t = threadIdx.x;
  double r = 0.0, d = 0.0;
  for (std::size_t v = a.v_begin + static_cast<std::size_t>(t); !done && v < a.v_end; v += kPagerankSumLanes) {
    r += a.delta[v];
    if (a.out_degree[v] == 0) d += a.rank_out[v];
  }
  residual[t] = r;
  dangling[t] = d;
  __syncthreads();
  for (int h = kPagerankSumLanes / 2; h > 0; h /= 2) {
    if (t < h) {
      residual[t] += residual[t + h];
      dangling[t] += dangling[t + h];
    }
    __syncthreads();
  }
  if (t != 0 || done) return;
  PagerankState& s = *a.state;
  s.residual_sum += residual[0];
  s.dangling_sum += dangling[0];
  s.edges += a.offsets[a.v_end] - a.offsets[a.v_begin];
  if (a.v_end == a.vertices) {  // the iteration's last slice
    const double n = static_cast<double>(a.vertices), damping = static_cast<double>(a.damping);
    s.residual = s.residual_sum;
    s.iterations += 1;
    s.base = static_cast<float>(fma(damping, s.dangling_sum / n, (1.0 - damping) / n));
    s.residual_sum = 0.0;
    s.dangling_sum = 0.0;
    s.done = s.residual < a.tolerance || s.iterations >= a.max_iterations ? 1u : 0u;
  }
}

template <typename real>
void pagerank_step(const PagerankStep& a, cudaStream_t stream) {
  static_assert(std::is_same_v<real, float>, "pagerank_step: fp32 only");
  static_assert(kPagerankThreads % 32 == 0 && kPagerankSumLanes % 32 == 0, "whole warps");
  if (a.v_end <= a.v_begin) return;
  PIPELANE_LAUNCH(pagerank_vertices_kernel, dim3(elementwise_blocks(a.v_end - a.v_begin, kPagerankThreads)),
                  dim3(kPagerankThreads), 0, stream, a);
  PIPELANE_LAUNCH(pagerank_sums_kernel, dim3(1), dim3(kPagerankSumLanes), 0, stream, a);
}

}  // namespace pipelane::cuda
