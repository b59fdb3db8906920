// pagerank: PageRank by power iteration on a CSR graph, sliced so that one step() touches at most
// `slice_edges` edges (a step is a bounded slice of one iteration; the vertex it stops in is
// resumed mid-adjacency on the next step).
//
// [lane.pagerank] options
//   graph = PATH         SNAP edge list: "src dst" per line (whitespace separated, non-negative
//                        integer ids), '#' comments and blank lines ignored. Vertex count is
//                        max id + 1 (ids are not renumbered; unused ids are isolated vertices).
//   generate = rmat      instead of graph: a Graph500-style R-MAT graph (a=0.57 b=0.19 c=0.19
//                        d=0.05, no label permutation, duplicates and self loops kept)
//   scale = 16           R-MAT: 2^scale vertices            [1, 31]
//   edge_factor = 16     R-MAT: edge_factor * 2^scale edges [1, 1024]
//   seed = 1             R-MAT generator seed
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
#include <cstdint>
#include <memory>

#include "lanes/lane.h"

namespace pipelane {

std::unique_ptr<Lane> make_pagerank_lane();

// The R-MAT generator the lane uses (deterministic for a seed), for tests and tools.
// Calls emit(src, dst) for edge_factor * 2^scale edges.
template <typename Emit>
void for_each_rmat_edge(int scale, std::int64_t edge_factor, std::uint64_t seed, Emit&& emit) {
  std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  auto next = [&s]() {  // splitmix64
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  const std::uint64_t edges = static_cast<std::uint64_t>(edge_factor) << scale;
  // Quadrant thresholds on 32-bit uniforms: a=0.57, a+b=0.76, a+b+c=0.95.
  constexpr std::uint64_t ta = 2448131358ull, tab = 3264175145ull, tabc = 4080218931ull;
  for (std::uint64_t e = 0; e < edges; ++e) {
    std::uint32_t src = 0, dst = 0;
    for (int bit = scale - 1; bit >= 0;) {
      std::uint64_t r = next();
      for (int half = 0; half < 2 && bit >= 0; ++half, --bit, r >>= 32) {
        const std::uint64_t u = r & 0xFFFFFFFFull;
        if (u < ta) {
        } else if (u < tab) {
          dst |= 1u << bit;
        } else if (u < tabc) {
          src |= 1u << bit;
        } else {
          src |= 1u << bit;
          dst |= 1u << bit;
        }
      }
    }
    emit(src, dst);
  }
}

}  // namespace pipelane
