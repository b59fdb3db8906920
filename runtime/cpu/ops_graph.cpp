// The graph lanes' bounded steps on the CPU (Backend::bfs_step, Backend::graphsgd_step,
// runtime/backend.h). BFS: one pull pass slice, its counts integer sums (any thread order gives
// them). SGD: the graphsgd lane's own serial loop (graphsgd_edges.h), so its bits.
#include <cmath>

#include "runtime/cpu/cpu_ops.h"
#include "runtime/graphsgd_edges.h"
#include "runtime/graph_step_finish.h"

namespace pipelane::cpu {

void bfs_step(const BfsStep& a) {
  BfsState& s = *a.state;
  if (s.done != 0 || a.v_end <= a.v_begin) return;
  const std::int32_t level = s.level;
  const std::uint64_t source = s.source;
  std::uint64_t found = 0, edges = 0;
#pragma omp parallel for schedule(dynamic, 1024) reduction(+ : found, edges)
  for (std::int64_t i = a.v_begin; i < static_cast<std::int64_t>(a.v_end); ++i) {
    const auto v = static_cast<std::uint64_t>(i);
    std::int32_t depth = -1;
    if (level < 0) {
      depth = v == source ? 0 : -1;
      found += v == source;
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
  s.found += found;
  s.edges += edges;
  if (a.v_end == a.vertices) bfs_end_pass(s, a);
}

void graphsgd_step(const GraphSgdStep& a) {
  GraphSgdState& s = *a.state;
  if (s.done != 0 || a.edge_end <= a.edge_begin) return;
  const int K = a.latent_dim;
  std::uint64_t row = a.row_begin;
  double sum = s.squared_error;
  for (std::uint64_t e = a.edge_begin; e < a.edge_end;) {
    while (a.offsets[row + 1] <= e) ++row;
    const std::uint64_t end = a.offsets[row + 1] < a.edge_end ? a.offsets[row + 1] : a.edge_end;
    float* p = a.user + row * static_cast<std::uint64_t>(K);
    if (a.pass == 0) graphsgd_edges::graphsgd_update_edges(p, a.item, a.items, a.ratings, e, end, K, a.learning_rate, a.lambda);
    else sum = graphsgd_edges::graphsgd_measure_edges(p, a.item, a.items, a.ratings, e, end, K, sum);
    e = end;
  }
  s.squared_error = sum;
  s.edges += a.edge_end - a.edge_begin;
  if (a.edge_end == a.edges) graphsgd_end_pass(s, a);
}

}  // namespace pipelane::cpu
