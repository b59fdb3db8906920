// pagerank: PageRank by power iteration on a CSR graph, sliced so that one step() touches at most
// `slice_edges` edges (a step is a bounded slice of one iteration; the vertex it stops in is
// resumed mid-adjacency on the next step).
//
// [lane.pagerank] options
//   graph, generate, scale, edge_factor, seed: the graph, as for every graph lane
//                        (graph/edge_source.h: a SNAP edge list, .txt or .txt.gz, or R-MAT; a
//                        weight column is ignored here)
//   damping = 0.85       [0, 1]
//   tolerance = 1e-8     stop when the L1 change of one iteration is below this
//   max_iterations = 100
//   slice_edges = 2097152  edges per step (each vertex finalized also counts as one); ~1.5 ms
//                        on a cache-resident graph, more when the rank vector misses cache
//   top_k = 10           vertices written to OUTPUT_DIR/top_k.txt ("vertex score" per line)
//   precision = auto     fp64: the host loop below (the CPU backend only); fp32: the step through
//                        Backend::pagerank_step (pagerank_lane_device.h: whole vertices per slice,
//                        graph and ranks in the arena, device memory on a GPU); auto: fp64 on the
//                        CPU backend, fp32 on a device backend. The CPU backend's fp32 gives the
//                        GPU's bits.
//
// Edges are pulled over in-edges: r'[v] = (1-d)/N + d * (sum_{u->v} r[u]/outdeg(u) + D/N), where
// D is the rank held by dangling vertices (no out-edges), so their mass is spread uniformly.
// Duplicate edges count with their multiplicity. The CSR arrays and rank vectors come from
// ctx.arena: a graph too big for the quota is a LaneError at setup. Work unit: edges.
// runs_on_device() is true: on a device backend the lane runs the fp32 step there.
#pragma once
#include <memory>

#include "lanes/lane.h"

namespace pipelane {

std::unique_ptr<Lane> make_pagerank_lane();

}  // namespace pipelane
