// Backend::bfs_step (runtime/backend.h has the semantics): one pull (bottom-up) pass slice of a
// level-synchronous BFS. One thread per vertex writes its own depth_out from depth_in only (two
// buffers: no thread reads what another writes in the same pass), so the depths do not depend on
// the thread order; each block sums its newly reached vertices and in-edges read and adds them to
// the state by one 64-bit integer atomic each (integer addition: the same total in any order).
// The pass's last slice ends it in a second launch of one thread (runtime/graph_step_finish.h, the
// CPU op's very code), so the host never reads a count to learn that a traversal ended.
#pragma once
#include "runtime/cuda/cuda_ops_graph.h"
#include "runtime/cuda/kernels/launch.cuh"
#include "runtime/graph_step_finish.h"

namespace pipelane::cuda {

constexpr int kBfsThreads = 256;

__device__ __forceinline__ unsigned long long warp_sum_u64(unsigned long long v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

static __global__ void bfs_vertices_kernel(BfsStep a) {
  __shared__ unsigned long long block_found[kBfsThreads / 32];
  __shared__ unsigned long long block_edges[kBfsThreads / 32];
  if (a.state->done != 0) return;  // uniform: bfs_end_pass runs in a later launch
  const std::int32_t level = a.state->level;
  const std::uint64_t source = a.state->source;
  unsigned long long found = 0, edges = 0;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t v = a.v_begin + static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < a.v_end;
       v += stride) {
    std::int32_t depth = -1;
    if (level < 0) {
      depth = v == source ? 0 : -1;
      found += v == source ? 1u : 0u;
    } else if (a.depth_in[v] >= 0) {
      depth = a.depth_in[v];
    } else {
      for (std::uint64_t e = a.offsets[v]; e < a.offsets[v + 1]; ++e) {
        ++edges;
        if (a.depth_in[a.sources[e]] == level) {
          depth = level + 1;
          ++found;
          break;
        }
      }
    }
    a.depth_out[v] = depth;
  }
  found = warp_sum_u64(found);
  edges = warp_sum_u64(edges);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) {
    block_found[warp] = found;
    block_edges[warp] = edges;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < kBfsThreads / 32; ++w) {
    found += block_found[w];
    edges += block_edges[w];
  }
  if (found != 0) atomicAdd(reinterpret_cast<unsigned long long*>(&a.state->found), found);
  if (edges != 0) atomicAdd(reinterpret_cast<unsigned long long*>(&a.state->edges), edges);
}

static __global__ void bfs_end_pass_kernel(BfsStep a) {
  if (a.state->done == 0) bfs_end_pass(*a.state, a);
}

}  // namespace pipelane::cuda
