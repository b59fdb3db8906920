// The CUDA backend's graph-lane steps (Backend::bfs_step, Backend::graphsgd_step): the kernels of
// kernels/bfs.cuh and graphsgd.cuh on the op's stream (a lane's Low stream), nothing waited for.
#include "runtime/cuda/backend/cuda_backend_impl.h"
#include "runtime/cuda/cuda_ops_graph.h"

namespace pipelane::cuda {

void CudaBackendImpl::bfs_step(const BfsStep& a, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("bfs_step", {a.offsets, a.sources, a.depth_in, a.depth_out, a.state, a.records, a.level_sizes});
  cuda::bfs_step(a, h);
}

void CudaBackendImpl::graphsgd_step(const GraphSgdStep& a, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("graphsgd_step", {a.offsets, a.items, a.ratings, a.user, a.item, a.state, a.rmse_history});
  cuda::graphsgd_step(a, h);
}

}  // namespace pipelane::cuda
