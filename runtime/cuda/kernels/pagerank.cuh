// PageRank's pull step over a slice of destination vertices (the pagerank lane's device step): a
// CSR by destination, one thread per destination vertex, its in-edges summed in CSR order. No
// float atomics and no cross-thread sums: every output is one thread's, so the result does not
// depend on the grid, the block order or the device, and equals a CPU loop over the same CSR in
// the same order bit for bit (the update is an explicit fused multiply-add, which both sides round
// once).
#pragma once
#include <type_traits>

#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/kernels/launch.cuh"

namespace pipelane::cuda {

constexpr int kPagerankThreads = 256;

template <typename real>
__global__ void pagerank_step_kernel(real* rank_out, real* contrib_out, real* delta, const real* rank_in,
                                     const real* contrib, const std::uint64_t* offsets,
                                     const std::uint32_t* sources, const std::uint32_t* out_degree, real base,
                                     real damping, std::uint32_t v_begin, std::uint32_t v_end) {
  static_assert(std::is_same_v<real, float>, "pagerank_step: fp32 only");
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t v = v_begin + static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < v_end;
       v += stride) {
    float acc = 0.0f;
    for (std::uint64_t e = offsets[v]; e < offsets[v + 1]; ++e) acc += contrib[sources[e]];
    const float r = fmaf(damping, acc, base);
    rank_out[v] = r;
    contrib_out[v] = out_degree[v] == 0 ? 0.0f : r / static_cast<float>(out_degree[v]);
    delta[v] = fabsf(r - rank_in[v]);
  }
}

template <typename real>
void pagerank_step(real* rank_out, real* contrib_out, real* delta, const real* rank_in, const real* contrib,
                   const std::uint64_t* offsets, const std::uint32_t* sources, const std::uint32_t* out_degree,
                   real base, real damping, std::uint32_t v_begin, std::uint32_t v_end, cudaStream_t stream) {
  if (v_end <= v_begin) return;
  PIPELANE_LAUNCH(pagerank_step_kernel<real>, dim3(elementwise_blocks(v_end - v_begin, kPagerankThreads)),
                  dim3(kPagerankThreads), 0, stream, rank_out, contrib_out, delta, rank_in, contrib, offsets,
                  sources, out_degree, base, damping, v_begin, v_end);
}

}  // namespace pipelane::cuda
