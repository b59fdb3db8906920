// The end of a BFS pass and of a graph SGD iteration (runtime/backend.h's semantics), shared by the
// CPU ops (runtime/cpu/ops_graph.cpp) and the CUDA kernels (runtime/cuda/kernels/bfs.cuh,
// graphsgd.cuh): one thread runs them after every slice of the pass, so every backend writes the
// same state.
#pragma once
#include <math.h>

#include "runtime/backend.h"

#if defined(__CUDACC__)
#define PIPELANE_HOST_DEVICE __host__ __device__
#else
#define PIPELANE_HOST_DEVICE
#endif

namespace pipelane {

PIPELANE_HOST_DEVICE inline void bfs_end_pass(BfsState& s, const BfsStep& a) {
  const std::int32_t depth = s.level + 1;  // the depth this pass gave (0: the source)
  const bool recorded = s.traversal < static_cast<std::int64_t>(a.record_capacity);
  s.passes += 1;
  if (s.found > 0) {
    if (recorded && static_cast<std::uint32_t>(depth) < kBfsRecordedLevels)
      a.level_sizes[static_cast<std::uint64_t>(s.traversal) * kBfsRecordedLevels + depth] = s.found;
    s.reached += s.found;
    s.found = 0;
    s.level = depth;
    return;
  }
  // Nothing new at this depth: the traversal is over, with levels 0 .. depth - 1.
  if (recorded) a.records[s.traversal] = BfsTraversalRecord{s.source, s.reached, static_cast<std::uint64_t>(depth), s.edges};
  s.edges_total += s.edges;
  s.traversal += 1;
  s.level = -1;
  s.reached = 0;
  s.edges = 0;
  if (s.traversal >= a.traversals) {
    s.done = 1;
    return;
  }
  s.source = (a.first_source + static_cast<std::uint64_t>(s.traversal)) % a.vertices;
}

// The end of a pass (its slice ending at `edges`): the update pass's starts the RMSE pass from 0,
// the RMSE pass's ends the iteration. squared_error keeps the last RMSE pass's sum until the next
// update pass ends, as the graphsgd lane's host loop keeps it (their states are the same).
PIPELANE_HOST_DEVICE inline void graphsgd_end_pass(GraphSgdState& s, const GraphSgdStep& a) {
  if (a.pass == 0) {
    s.squared_error = 0.0;
    return;
  }
  s.rmse = sqrt(s.squared_error / static_cast<double>(a.edges));
  if (s.iterations < static_cast<std::int64_t>(a.history_capacity)) a.rmse_history[s.iterations] = s.rmse;
  s.iterations += 1;
  s.done = s.iterations >= a.max_iterations || s.rmse < a.tolerance ? 1u : 0u;
}

}  // namespace pipelane
