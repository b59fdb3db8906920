// The graph lanes' one CSR builder: edges of an EdgeSource sorted into rows (by source for the
// push lanes, bfs and graphsgd; by destination for pagerank's pull), stably, so a row lists its
// edges in source order and every lane sees the same graph in the same order on every run.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "lanes/builtin/graph/edge_source.h"

namespace pipelane {

enum class CsrRows { BySource, ByDestination };

struct CsrLayout {
  CsrRows rows = CsrRows::BySource;
  bool other_degree = false;   // also count each vertex's degree in the other direction
  bool weights = false;        // keep the file's third column (1 where a line has none)
  bool add_reverse = false;    // each edge u-v also as v-u (an undirected graph listed once)
};

// A graph in CSR form; the arrays live where the CsrAllocate put them (the lane's arena or a
// HostCsrMemory). Row v's edges are neighbors[offsets[v] .. offsets[v+1]).
struct Csr {
  std::uint64_t vertices = 0, edges = 0;  // edges counts reversed copies too
  std::uint64_t source_edges = 0;          // edges as read
  std::uint64_t weighted_edges = 0;        // source edges that had a third column
  std::uint64_t* offsets = nullptr;        // vertices + 1
  std::uint32_t* other_degree = nullptr;   // vertices (layout.other_degree), e.g. out-degree of an in-CSR
  std::uint32_t* neighbors = nullptr;      // edges: the row vertex's other end
  float* weights = nullptr;                // edges (layout.weights)
};

// Zero-filled memory of `bytes` (8-byte aligned at least); throws ArenaQuotaError past a quota.
using CsrAllocate = std::function<void*(std::size_t bytes, const char* what)>;

// Host memory for a CSR a lane uploads elsewhere (pagerank's fp32 step) or tests hold.
class HostCsrMemory {
 public:
  CsrAllocate allocator();

 private:
  std::vector<std::unique_ptr<std::uint64_t[]>> blocks_;
};

// Reads the source three times (counts, degrees, placement): a file is never held in memory as
// an edge list. Allocates offsets, other_degree, neighbors, weights in that order. A file without
// edges, or one that changes between the passes, is a LaneError.
Csr build_csr(const EdgeSource& source, const CsrLayout& layout, const CsrAllocate& allocate);

}  // namespace pipelane
