#include "lanes/builtin/graph/csr.h"

#include <algorithm>
#include <string>

namespace pipelane {

CsrAllocate HostCsrMemory::allocator() {
  return [this](std::size_t bytes, const char*) -> void* {
    const std::size_t words = (bytes + 7) / 8;
    blocks_.push_back(std::make_unique<std::uint64_t[]>(std::max<std::size_t>(words, 1)));  // zeroed
    return blocks_.back().get();
  };
}

namespace {

template <typename T>
T* allocate_array(const CsrAllocate& allocate, std::uint64_t n, const char* what) {
  return static_cast<T*>(allocate(static_cast<std::size_t>(n) * sizeof(T), what));
}

// Vertex and edge counts: known for R-MAT, one pass over a file.
void count(const EdgeSource& source, Csr& g) {
  if (source.generated()) {
    g.vertices = std::uint64_t{1} << source.scale;
    g.source_edges = static_cast<std::uint64_t>(source.edge_factor) << source.scale;
    return;
  }
  std::uint64_t max_id = 0;
  for_each_source_edge(source, [&](const SourceEdge& e) {
    max_id = std::max<std::uint64_t>(max_id, std::max(e.src, e.dst));
    ++g.source_edges;
    g.weighted_edges += e.has_weight;
  });
  if (g.source_edges == 0) throw LaneError(source.lane + ": graph '" + source.path + "' has no edges");
  g.vertices = max_id + 1;
}

}  // namespace

Csr build_csr(const EdgeSource& source, const CsrLayout& layout, const CsrAllocate& allocate) {
  Csr g;
  count(source, g);
  const std::uint64_t n = g.vertices;
  g.edges = g.source_edges * (layout.add_reverse ? 2 : 1);
  g.offsets = allocate_array<std::uint64_t>(allocate, n + 1, "graph row offsets");
  if (layout.other_degree) g.other_degree = allocate_array<std::uint32_t>(allocate, n, "graph other-end degrees");
  g.neighbors = allocate_array<std::uint32_t>(allocate, g.edges, "graph neighbours");
  if (layout.weights) g.weights = allocate_array<float>(allocate, g.edges, "graph edge weights");

  const bool by_source = layout.rows == CsrRows::BySource;
  // Pass 2: row lengths (and the other end's degrees). The guards keep a file that changed
  // since pass 1 from writing out of bounds; the count check below then refuses it.
  std::uint64_t seen = 0;
  auto place_degree = [&](std::uint32_t row, std::uint32_t col) {
    ++g.offsets[row + 1];
    if (g.other_degree) ++g.other_degree[col];
  };
  for_each_source_edge(source, [&](const SourceEdge& e) {
    if (e.src >= n || e.dst >= n || seen >= g.source_edges) { ++seen; return; }
    ++seen;
    place_degree(by_source ? e.src : e.dst, by_source ? e.dst : e.src);
    if (layout.add_reverse) place_degree(by_source ? e.dst : e.src, by_source ? e.src : e.dst);
  });
  if (seen != g.source_edges)
    throw LaneError(source.lane + ": graph '" + source.describe() + "' changed while it was read");
  for (std::uint64_t v = 0; v < n; ++v) g.offsets[v + 1] += g.offsets[v];
  // Pass 3: a stable counting sort; offsets[v] runs ahead as row v fills, then shifts back.
  auto place_edge = [&](std::uint32_t row, std::uint32_t col, float w) {
    if (g.offsets[row] >= g.offsets[row + 1]) return;  // a changed file
    const std::uint64_t at = g.offsets[row]++;
    g.neighbors[at] = col;
    if (g.weights) g.weights[at] = w;
  };
  for_each_source_edge(source, [&](const SourceEdge& e) {
    if (e.src >= n || e.dst >= n) return;
    const float w = e.has_weight ? e.weight : 1.0f;
    place_edge(by_source ? e.src : e.dst, by_source ? e.dst : e.src, w);
    if (layout.add_reverse) place_edge(by_source ? e.dst : e.src, by_source ? e.src : e.dst, w);
  });
  for (std::uint64_t v = n; v > 0; --v) g.offsets[v] = g.offsets[v - 1];
  g.offsets[0] = 0;
  return g;
}

}  // namespace pipelane
