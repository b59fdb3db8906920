// Backend::graphsgd_step (runtime/backend.h has the semantics): a slice of Gardenia's SGD in the
// CPU loop's exact edge order. Edge i reads the vectors edge i - 1 wrote, so the slice is serial:
// one warp walks its edges, lane l holding dimensions l, l + 32, ... of both vectors (every lane
// reads and writes only its own dimensions, so no lane waits on another's memory), the dot product
// each lane's partial sum in k order and then a fixed butterfly (warp_sum: every lane gets the same
// bits). Deterministic, but not the CPU's sequential sum's bits. Not Gardenia's GPU kernel, which
// runs edges in parallel Hogwild-style (racing updates, results that change with the thread order):
// the issue asks for results that do not depend on the order, and a bounded slice per bubble.
#pragma once
#include "runtime/cuda/cuda_ops_graph.h"
#include "runtime/cuda/kernels/launch.cuh"
#include "runtime/graph_step_finish.h"

namespace pipelane::cuda {

static __global__ void graphsgd_kernel(GraphSgdStep a) {
  GraphSgdState& s = *a.state;
  const bool done = s.done != 0;
  __syncwarp();  // every lane has read done before lane 0 may write the state
  if (done) return;
  const int lane = threadIdx.x, K = a.latent_dim;
  const float lr = a.learning_rate, lambda = a.lambda;
  std::uint64_t row = a.row_begin;
  double sum = s.squared_error;
  for (std::uint64_t e = a.edge_begin; e < a.edge_end; ++e) {
    while (a.offsets[row + 1] <= e) ++row;
    float* p = a.user + row * static_cast<std::uint64_t>(K);
    float* q = a.item + static_cast<std::uint64_t>(a.items[e]) * K;
    float part = 0.0f;
    for (int k = lane; k < K; k += 32) part = fmaf(p[k], q[k], part);
    const float err = a.ratings[e] - warp_sum(part);
    if (a.pass == 0) {
      for (int k = lane; k < K; k += 32) {
        const float pk = p[k], qk = q[k];
        p[k] = fmaf(lr, fmaf(err, qk, -(lambda * pk)), pk);  // the CPU loop's fmas (runtime/graphsgd_edges.h)
        q[k] = fmaf(lr, fmaf(err, pk, -(lambda * qk)), qk);
      }
    } else {
      sum += static_cast<double>(err) * static_cast<double>(err);
    }
  }
  if (lane != 0) return;
  s.squared_error = sum;
  s.edges += a.edge_end - a.edge_begin;
  if (a.edge_end == a.edges) graphsgd_end_pass(s, a);
}

}  // namespace pipelane::cuda
