// bfs against a queue BFS, sliced and resumed.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <sstream>
#include <vector>

#include "lanes/builtin/bfs_lane.h"
#include "lanes/builtin/builtin_lanes.h"
#include "lanes/builtin/graph/rmat.h"
#include "tests/lanes/builtin_io_test_env.h"

namespace pipelane {
namespace {

using testing_io::LaneEnv;
using Edges = std::vector<std::pair<std::uint32_t, std::uint32_t>>;

// Textbook BFS with a queue: depth of every vertex, -1 where unreachable.
std::vector<int> reference_depths(std::size_t n, const Edges& edges, bool undirected, std::uint32_t source) {
  std::vector<std::vector<std::uint32_t>> adj(n);
  for (auto [s, d] : edges) {
    adj[s].push_back(d);
    if (undirected) adj[d].push_back(s);
  }
  std::vector<int> depth(n, -1);
  std::deque<std::uint32_t> queue{source};
  depth[source] = 0;
  while (!queue.empty()) {
    const std::uint32_t u = queue.front();
    queue.pop_front();
    for (std::uint32_t v : adj[u])
      if (depth[v] < 0) {
        depth[v] = depth[u] + 1;
        queue.push_back(v);
      }
  }
  return depth;
}

std::vector<int> read_depths(const std::string& path, std::size_t n) {
  std::istringstream in(testing_io::read_file(path));
  std::string line;
  std::getline(in, line);  // header
  std::vector<int> depth(n, -2);
  std::size_t v;
  int d;
  while (in >> v >> d) depth.at(v) = d;
  return depth;
}

void run_to_end(Lane& lane, LaneContext& ctx) {
  for (int steps = 0; !lane.finished() && steps < 1000000; ++steps) lane.step(ctx);
}

Edges rmat_edges(int scale, int edge_factor, std::uint64_t seed) {
  Edges edges;
  for_each_rmat_edge(scale, edge_factor, seed, [&](std::uint32_t s, std::uint32_t d) { edges.emplace_back(s, d); });
  return edges;
}

TEST(BfsLane, DepthsMatchAQueueBfsDirectedAndUndirected) {
  const Edges edges = rmat_edges(10, 4, 2);
  for (bool undirected : {false, true}) {
    SCOPED_TRACE(undirected ? "undirected" : "directed");
    LaneEnv run("bfs", {{"generate", "rmat"}, {"scale", "10"}, {"edge_factor", "4"}, {"seed", "2"},
                        {"slice_edges", "50"}, {"write_depths", "true"},
                        {"undirected", undirected ? "true" : "false"}});
    auto lane = builtin_lane_factories().at("bfs")();
    lane->setup(run.ctx);
    EXPECT_TRUE(lane->runs_on_device());  // on a device backend it runs the pull step there
    int steps = 0;
    for (; !lane->finished(); ++steps) {
      EXPECT_LE(lane->step(run.ctx), 50.0);  // bounded slices
      ASSERT_LT(steps, 1000000);
    }
    const std::vector<int> want = reference_depths(1024, edges, undirected, 0);
    EXPECT_EQ(read_depths(run.dir + "/depths.txt", 1024), want);
    const auto rep = lane->report();
    ASSERT_EQ(rep["traversals"].size(), 1u);
    const auto& t = rep["traversals"][0];
    std::vector<std::uint64_t> sizes;
    for (int d : want)
      if (d >= 0) {
        if (sizes.size() <= static_cast<std::size_t>(d)) sizes.resize(d + 1, 0);
        ++sizes[d];
      }
    EXPECT_EQ(t["level_sizes"].get<std::vector<std::uint64_t>>(), sizes);
    EXPECT_EQ(t["reached"].get<std::uint64_t>(), static_cast<std::uint64_t>(1024 - std::count(want.begin(), want.end(), -1)));
    EXPECT_GT(t["levels"].get<int>(), 2);
    EXPECT_GT(steps, 10);  // the traversal took many slices
    if (undirected) EXPECT_EQ(rep["edges"], 2 * edges.size());
  }
}

TEST(BfsLane, SeveralTraversalsAndSaveLoadMidLevelResumeExactly) {
  const std::map<std::string, std::string> opts = {{"generate", "rmat"}, {"scale", "9"}, {"edge_factor", "6"},
                                                   {"undirected", "true"}, {"traversals", "3"}, {"source", "510"},
                                                   {"slice_edges", "97"}, {"write_depths", "true"}};
  LaneEnv a("bfs", opts);
  auto straight = make_bfs_lane();
  straight->setup(a.ctx);
  run_to_end(*straight, a.ctx);
  const auto want = straight->report();
  ASSERT_EQ(want["traversals"].size(), 3u);
  EXPECT_EQ(want["traversals"][2]["source"], 0);  // 510, 511, then 512 mod 512
  // The last traversal's depths against the reference.
  const Edges edges = rmat_edges(9, 6, 1);
  const std::vector<int> depths = reference_depths(512, edges, true, 0);
  EXPECT_EQ(read_depths(a.dir + "/depths.txt", 512), depths);
  // A traversal scans every edge of every vertex it reaches (both directions here), and only those.
  std::uint64_t scanned = 0;
  for (auto [s, d] : edges) scanned += (depths[s] >= 0) + (depths[d] >= 0);
  EXPECT_EQ(want["traversals"][2]["edges_scanned"].get<std::uint64_t>(), scanned);
  std::uint64_t total = 0;
  for (const auto& t : want["traversals"]) total += t["edges_scanned"].get<std::uint64_t>();
  EXPECT_EQ(want["edges_scanned"].get<std::uint64_t>(), total);

  LaneEnv b("bfs", opts);
  auto first = make_bfs_lane();
  first->setup(b.ctx);
  // 510 and 511 reach next to nothing (R-MAT's high ids have few edges); the traversal from 0
  // scans ~6000 edges: 30 steps of 97 units stop inside one of its levels.
  for (int i = 0; i < 30; ++i) first->step(b.ctx);
  ASSERT_FALSE(first->finished());
  EXPECT_EQ(first->report()["traversals"].size(), 2u);
  const std::string state = first->save();
  LaneEnv c("bfs", opts);
  auto second = make_bfs_lane();
  second->setup(c.ctx);
  second->load(state);
  run_to_end(*second, c.ctx);
  EXPECT_EQ(second->report(), want);
  EXPECT_EQ(testing_io::read_file(c.dir + "/depths.txt"), testing_io::read_file(a.dir + "/depths.txt"));

  LaneEnv d("bfs", {{"generate", "rmat"}, {"scale", "8"}});
  auto other = make_bfs_lane();
  other->setup(d.ctx);
  EXPECT_THROW(other->load(state), LaneError);
}

// step = backend on the CPU backend: the pull step through Backend::bfs_step (what a GPU runs)
// gives the host push step's depths, reached vertices and level sizes for every traversal (BFS
// depths do not depend on visit order); only "edges scanned" counts another thing. Saved
// mid-pass it resumes to the same report; a host step's state is refused with a clear error.
TEST(BfsLane, BackendPullStepGivesTheHostStepsTraversalsAndResumes) {
  std::map<std::string, std::string> opts = {{"generate", "rmat"}, {"scale", "9"}, {"edge_factor", "6"},
                                             {"undirected", "true"}, {"traversals", "3"}, {"source", "510"},
                                             {"slice_edges", "97"}, {"write_depths", "true"}};
  LaneEnv host("bfs", opts);
  auto push = make_bfs_lane();
  push->setup(host.ctx);
  run_to_end(*push, host.ctx);
  opts["step"] = "backend";
  LaneEnv a("bfs", opts);
  auto pull = make_bfs_lane();
  pull->setup(a.ctx);
  int steps = 0;
  for (; !pull->finished() && steps < 1000000; ++steps) pull->step(a.ctx);
  pull->teardown(a.ctx);
  const auto want = push->report(), got = pull->report();
  EXPECT_NE(got["step"].get<std::string>().find("Backend::bfs_step"), std::string::npos) << got["step"];
  EXPECT_EQ(got["traversals_done"], 3);
  ASSERT_EQ(got["traversals"].size(), 3u);
  for (int t = 0; t < 3; ++t)
    for (const char* key : {"source", "reached", "levels", "level_sizes"})
      EXPECT_EQ(got["traversals"][t][key], want["traversals"][t][key]) << "traversal " << t << " " << key;
  EXPECT_GT(got["edges_scanned"].get<std::uint64_t>(), 0u);
  EXPECT_EQ(testing_io::read_file(a.dir + "/depths.txt"), testing_io::read_file(host.dir + "/depths.txt"));
  EXPECT_GT(steps, 30);  // bounded slices: many steps

  LaneEnv b("bfs", opts);
  auto first = make_bfs_lane();
  first->setup(b.ctx);
  for (int i = 0; i < steps / 2 + 3; ++i) first->step(b.ctx);  // mid-pass of the traversal from 0
  ASSERT_FALSE(first->finished());
  const std::string state = first->save();
  LaneEnv c("bfs", opts);
  auto second = make_bfs_lane();
  second->setup(c.ctx);
  second->load(state);
  run_to_end(*second, c.ctx);
  second->teardown(c.ctx);
  EXPECT_EQ(second->report(), got);
  EXPECT_EQ(testing_io::read_file(c.dir + "/depths.txt"), testing_io::read_file(a.dir + "/depths.txt"));
  try {
    second->load(push->save());
    FAIL() << "a host step's state was loaded into the backend step";
  } catch (const LaneError& e) {
    EXPECT_NE(std::string(e.what()).find("[lane.bfs] step"), std::string::npos) << e.what();
  }
  LaneEnv bad("bfs", {{"generate", "rmat"}, {"scale", "4"}, {"step", "gpu"}});
  EXPECT_THROW(make_bfs_lane()->setup(bad.ctx), LaneError);
}

TEST(BfsLane, SourceOutsideTheGraphIsRefused) {
  LaneEnv run("bfs", {{"generate", "rmat"}, {"scale", "4"}, {"source", "16"}});
  try {
    make_bfs_lane()->setup(run.ctx);
    FAIL() << "no error";
  } catch (const LaneError& e) {
    EXPECT_NE(std::string(e.what()).find("[lane.bfs] source = 16: the graph has vertices 0..15"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pipelane
