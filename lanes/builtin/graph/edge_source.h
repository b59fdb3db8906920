// Where a graph lane's edges come from: a SNAP edge-list file (plain or gzip, read through zlib)
// or the R-MAT generator. One parser of the options every graph lane shares:
//
//   graph = PATH         SNAP edge list: "src dst [weight]" per line (whitespace separated,
//                        non-negative integer ids; an optional third column is a numeric edge
//                        weight), '#' comments and blank lines ignored. PATH.gz (or any gzip file)
//                        is decompressed while it is read. Vertex count is max id + 1 (ids are not
//                        renumbered; unused ids are isolated vertices).
//   generate = rmat      instead of graph: rmat.h's generator
//   scale = 16           R-MAT: 2^scale vertices            [1, 31]
//   edge_factor = 16     R-MAT: edge_factor * 2^scale edges [1, 1024]
//   seed = 1             R-MAT generator seed
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "lanes/lane.h"

namespace pipelane {

struct EdgeSource {
  std::string lane;  // names the lane in every error ("pagerank: ...")
  std::string path;  // empty: R-MAT
  int scale = 16;
  std::int64_t edge_factor = 16;
  std::uint64_t seed = 1;

  bool generated() const { return path.empty(); }
  std::string describe() const;  // "rmat scale 10 edge_factor 16 seed 1" or the path
};

// Reads graph/generate/scale/edge_factor/seed from `o` (the caller still calls reject_unknown()).
EdgeSource read_edge_source(const LaneOptions& o);

constexpr std::uint64_t kMaxGraphVertexId = 0xFFFFFFFEull;  // ids are stored as uint32

// One edge as read: weight is the file's third column, absent (has_weight false) for two-column
// lines and generated edges.
struct SourceEdge {
  std::uint32_t src = 0, dst = 0;
  bool has_weight = false;
  float weight = 0.0f;
};

// Calls emit(edge) for every edge in source order. A malformed line is a LaneError naming the
// file and line; an unreadable or corrupt file one naming the file.
void for_each_source_edge(const EdgeSource& source, const std::function<void(const SourceEdge&)>& emit);

}  // namespace pipelane
