// The nvcc translation unit of the graph lanes' kernels (cuda_ops_graph.h) and their launchers:
// its own unit beside cuda_kernels.cu, so the GPT-2 kernels' unit is unchanged.
#include "runtime/cuda/kernels/bfs.cuh"
#include "runtime/cuda/kernels/graphsgd.cuh"

namespace pipelane::cuda {

void bfs_step(const BfsStep& a, cudaStream_t stream) {
  static_assert(sizeof(unsigned long long) == sizeof(std::uint64_t), "64-bit counters");
  if (a.v_end <= a.v_begin) return;
  PIPELANE_LAUNCH(bfs_vertices_kernel, dim3(elementwise_blocks(a.v_end - a.v_begin, kBfsThreads)),
                  dim3(kBfsThreads), 0, stream, a);
  if (a.v_end == a.vertices) PIPELANE_LAUNCH(bfs_end_pass_kernel, dim3(1), dim3(1), 0, stream, a);
}

void graphsgd_step(const GraphSgdStep& a, cudaStream_t stream) {
  if (a.edge_end <= a.edge_begin) return;
  PIPELANE_LAUNCH(graphsgd_kernel, dim3(1), dim3(32), 0, stream, a);
}

}  // namespace pipelane::cuda
