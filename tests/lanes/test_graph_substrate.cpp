// The graph lanes' CSR builder (lanes/builtin/graph/): SNAP files plain and gzipped, R-MAT, rows
// by source and by destination, against a stable sort of the edge list.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <string>
#include <vector>

#include "lanes/builtin/graph/csr.h"
#include "lanes/builtin/graph/edge_source.h"
#include "lanes/builtin/graph/rmat.h"
#include "tests/lanes/builtin_io_test_env.h"

namespace pipelane {
namespace {

using testing_io::LaneEnv;
struct Edge {
  std::uint32_t src, dst;
  float w;
};

// The CSR of `edges` the straightforward way: a stable sort by row, then the other ends in order.
void expect_csr_equals_stable_sort(const Csr& g, std::vector<Edge> edges, std::uint64_t n, bool by_source,
                                   bool weights) {
  std::stable_sort(edges.begin(), edges.end(), [&](const Edge& a, const Edge& b) {
    return by_source ? a.src < b.src : a.dst < b.dst;
  });
  ASSERT_EQ(g.vertices, n);
  ASSERT_EQ(g.edges, edges.size());
  std::vector<std::uint64_t> offsets(n + 1, 0);
  for (const Edge& e : edges) ++offsets[(by_source ? e.src : e.dst) + 1];
  for (std::uint64_t v = 0; v < n; ++v) offsets[v + 1] += offsets[v];
  for (std::uint64_t v = 0; v <= n; ++v) ASSERT_EQ(g.offsets[v], offsets[v]) << v;
  for (std::size_t i = 0; i < edges.size(); ++i) {
    ASSERT_EQ(g.neighbors[i], by_source ? edges[i].dst : edges[i].src) << i;
    if (weights) ASSERT_EQ(g.weights[i], edges[i].w) << i;
  }
}

EdgeSource file_source(const std::string& path) {
  EdgeSource s;
  s.lane = "test";
  s.path = path;
  return s;
}

void write_gzip(const std::string& path, const std::string& text) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

const char kSnapText[] =
    "# Directed graph (each unordered pair of nodes is saved once): test\n# FromNodeId\tToNodeId\n"
    "0\t1\n0 2\n1 2\r\n\n2 0\n3 2\n3 4\n4 5\n6 3\n8 0\n0 2";  // no final newline
const std::vector<Edge> kSnapEdges = {{0, 1, 1}, {0, 2, 1}, {1, 2, 1}, {2, 0, 1}, {3, 2, 1},
                                      {3, 4, 1}, {4, 5, 1}, {6, 3, 1}, {8, 0, 1}, {0, 2, 1}};

TEST(GraphSubstrate, SnapFileAndItsGzipGiveTheSameCsr) {
  LaneEnv env("graph", {});
  testing_io::write_file(env.dir + "/g.txt", kSnapText);
  write_gzip(env.dir + "/g.txt.gz", kSnapText);
  for (const char* name : {"/g.txt", "/g.txt.gz"}) {
    for (bool by_source : {true, false}) {
      HostCsrMemory memory;
      const Csr g = build_csr(file_source(env.dir + name),
                              CsrLayout{by_source ? CsrRows::BySource : CsrRows::ByDestination, true, true, false},
                              memory.allocator());
      SCOPED_TRACE(std::string(name) + (by_source ? " by source" : " by destination"));
      expect_csr_equals_stable_sort(g, kSnapEdges, 9, by_source, true);
      EXPECT_EQ(g.weighted_edges, 0u);
      EXPECT_EQ(g.other_degree[0], by_source ? 2u : 3u);  // in-degree of 0 / out-degree of 0
      EXPECT_EQ(g.other_degree[7], 0u);                 // never named: isolated
    }
  }
}

TEST(GraphSubstrate, WeightsAndReverseEdges) {
  LaneEnv env("graph", {});
  testing_io::write_file(env.dir + "/w.txt", "0 1 4.5\n2 0 1\n1 2 -2e-1\n");
  HostCsrMemory memory;
  const Csr g = build_csr(file_source(env.dir + "/w.txt"), CsrLayout{CsrRows::BySource, false, true, true},
                          memory.allocator());
  EXPECT_EQ(g.source_edges, 3u);
  EXPECT_EQ(g.weighted_edges, 3u);
  // Each edge u-v also as v-u, right after it in source order.
  expect_csr_equals_stable_sort(g, {{0, 1, 4.5f}, {1, 0, 4.5f}, {2, 0, 1}, {0, 2, 1}, {1, 2, -0.2f}, {2, 1, -0.2f}}, 3,
                                true, true);
}

TEST(GraphSubstrate, RmatInEdgesAreThePageRankLaneCsr) {
  std::vector<Edge> edges;
  for_each_rmat_edge(9, 4, 3, [&](std::uint32_t s, std::uint32_t d) { edges.push_back({s, d, 1}); });
  EdgeSource s;
  s.lane = "test";
  s.scale = 9;
  s.edge_factor = 4;
  s.seed = 3;
  HostCsrMemory memory;
  const Csr g = build_csr(s, CsrLayout{CsrRows::ByDestination, true, false, false}, memory.allocator());
  expect_csr_equals_stable_sort(g, edges, 512, false, false);
  std::vector<std::uint32_t> outdeg(512, 0);
  for (const Edge& e : edges) ++outdeg[e.src];
  for (std::size_t v = 0; v < 512; ++v) ASSERT_EQ(g.other_degree[v], outdeg[v]) << v;
  EXPECT_EQ(s.describe(), "rmat scale 9 edge_factor 4 seed 3");
}

std::string build_error(const std::string& path) {
  try {
    HostCsrMemory memory;
    build_csr(file_source(path), CsrLayout{}, memory.allocator());
  } catch (const LaneError& e) {
    return e.what();
  }
  return "";
}

TEST(GraphSubstrate, BadFilesAreRefusedWithFileAndLine) {
  LaneEnv env("graph", {});
  testing_io::write_file(env.dir + "/bad.txt", "0 1\n# fine\n1 2 x\n");
  EXPECT_NE(build_error(env.dir + "/bad.txt").find("bad.txt:3: malformed edge '1 2 x'"), std::string::npos)
      << build_error(env.dir + "/bad.txt");
  write_gzip(env.dir + "/bad.txt.gz", "0 1\n-1 2\n");
  EXPECT_NE(build_error(env.dir + "/bad.txt.gz").find("bad.txt.gz:2: malformed edge"), std::string::npos);
  testing_io::write_file(env.dir + "/big.txt", "0 4294967295\n");
  EXPECT_NE(build_error(env.dir + "/big.txt").find(":1: malformed edge"), std::string::npos);
  testing_io::write_file(env.dir + "/empty.txt", "# nothing\n\n");
  EXPECT_NE(build_error(env.dir + "/empty.txt").find("has no edges"), std::string::npos);
  EXPECT_NE(build_error(env.dir + "/absent.txt").find("test: cannot open graph"), std::string::npos);
  // A truncated gzip stream is an error, not a shorter graph.
  std::string many;
  for (int i = 0; i < 20000; ++i) many += std::to_string(i) + " " + std::to_string(i + 1) + "\n";
  write_gzip(env.dir + "/cut.txt.gz", many);
  const std::string whole = testing_io::read_file(env.dir + "/cut.txt.gz");
  testing_io::write_file(env.dir + "/cut.txt.gz", whole.substr(0, whole.size() / 2));
  EXPECT_NE(build_error(env.dir + "/cut.txt.gz").find("error reading graph"), std::string::npos)
      << build_error(env.dir + "/cut.txt.gz");
}

TEST(GraphSubstrate, OptionsAreReadOnceForEveryGraphLane) {
  LaneEnv both("bfs", {{"graph", "g.txt"}, {"generate", "rmat"}});
  EXPECT_THROW(read_edge_source(both.options), LaneError);
  LaneEnv file_scale("bfs", {{"graph", "g.txt"}, {"scale", "4"}});
  EXPECT_THROW(read_edge_source(file_scale.options), LaneError);
  LaneEnv other("bfs", {{"generate", "kronecker"}});
  EXPECT_THROW(read_edge_source(other.options), LaneError);
  LaneEnv rmat("bfs", {{"generate", "rmat"}, {"scale", "5"}});
  const EdgeSource s = read_edge_source(rmat.options);
  EXPECT_TRUE(s.generated());
  EXPECT_EQ(s.scale, 5);
  EXPECT_EQ(s.lane, "bfs");
}

}  // namespace
}  // namespace pipelane
