// The CUDA backend's PageRank step (Backend::pagerank_step): the kernels of kernels/pagerank.cuh
// on the op's stream (a lane's Low stream), nothing waited for.
#include "runtime/cuda/backend/cuda_backend_impl.h"
#include "runtime/cuda/cuda_ops.h"

namespace pipelane::cuda {

void CudaBackendImpl::pagerank_step(const PagerankStep& a, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("pagerank_step", {a.offsets, a.sources, a.out_degree, a.rank_in, a.contrib_in, a.rank_out,
                                  a.contrib_out, a.delta, a.state});
  cuda::pagerank_step<float>(a, h);
}

}  // namespace pipelane::cuda
