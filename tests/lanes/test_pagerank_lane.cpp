#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "lanes/builtin/builtin_lanes.h"
#include "lanes/builtin/graph/rmat.h"
#include "lanes/builtin/pagerank_lane.h"
#include "tests/lanes/builtin_io_test_env.h"

namespace pipelane {
namespace {

using testing_io::LaneEnv;
using Edges = std::vector<std::pair<std::uint32_t, std::uint32_t>>;

// Plain power iteration, O(V+E) per iteration: dangling mass spread uniformly.
std::vector<double> reference_pagerank(std::size_t n, const Edges& edges, double d, double tol,
                                       int max_it, int* iterations) {
  std::vector<double> outdeg(n, 0), r(n, 1.0 / n), next(n);
  for (auto [s, t] : edges) outdeg[s] += 1;
  int it = 0;
  while (it < max_it) {
    double dangling = 0;
    for (std::size_t v = 0; v < n; ++v)
      if (outdeg[v] == 0) dangling += r[v];
    std::fill(next.begin(), next.end(), (1 - d) / n + d * dangling / n);
    for (auto [s, t] : edges) next[t] += d * r[s] / outdeg[s];
    double residual = 0;
    for (std::size_t v = 0; v < n; ++v) residual += std::fabs(next[v] - r[v]);
    r.swap(next);
    ++it;
    if (residual < tol) break;
  }
  *iterations = it;
  return r;
}

std::vector<std::pair<std::uint64_t, double>> top_of(const std::vector<double>& r, std::size_t k) {
  std::vector<std::pair<std::uint64_t, double>> v;
  for (std::size_t i = 0; i < r.size(); ++i) v.emplace_back(i, r[i]);
  std::stable_sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.second > b.second; });
  v.resize(std::min(k, v.size()));
  return v;
}

int run_to_end(Lane& lane, LaneContext& ctx, int max_steps = 1000000) {
  int steps = 0;
  while (!lane.finished() && steps < max_steps) {
    lane.step(ctx);
    ++steps;
  }
  return steps;
}

TEST(PageRankLane, SmallGraphFileMatchesReference) {
  LaneEnv env("pagerank", {});
  const std::string path = env.dir + "/g.txt";
  // vertex 5 dangling, 7 isolated (never named), 8 points at 0; tabs, comments, CRLF, blank line.
  testing_io::write_file(path, "# Directed graph: test\n# FromNodeId\tToNodeId\n0\t1\n0 2\n1 2\r\n\n2 0\n3 2\n3 4\n4 5\n6 3\n8 0\n0 2\n");
  const Edges edges = {{0, 1}, {0, 2}, {1, 2}, {2, 0}, {3, 2}, {3, 4}, {4, 5}, {6, 3}, {8, 0}, {0, 2}};
  LaneEnv run("pagerank", {{"graph", path}, {"slice_edges", "3"}, {"top_k", "100"}});
  auto lane = builtin_lane_factories().at("pagerank")();
  lane->setup(run.ctx);
  EXPECT_EQ(lane->work_unit(), "edges");
  const int steps = run_to_end(*lane, run.ctx);
  ASSERT_TRUE(lane->finished());
  int ref_it = 0;
  const auto ref = reference_pagerank(9, edges, 0.85, 1e-8, 100, &ref_it);
  const auto rep = lane->report();
  EXPECT_EQ(rep["vertices"], 9);
  EXPECT_EQ(rep["edges"], 10);
  EXPECT_EQ(rep["iterations"], ref_it);
  EXPECT_TRUE(rep["converged"].get<bool>());
  EXPECT_LT(rep["residual"].get<double>(), 1e-8);
  EXPECT_GT(steps, ref_it * 3);  // slices of 3 work units: several steps per iteration
  const auto want = top_of(ref, 100);
  ASSERT_EQ(rep["top"].size(), 9u);
  double sum = 0;
  for (std::size_t i = 0; i < 9; ++i) {
    EXPECT_EQ(rep["top"][i]["vertex"].get<std::uint64_t>(), want[i].first) << i;
    EXPECT_NEAR(rep["top"][i]["score"].get<double>(), want[i].second, 1e-6) << i;
    EXPECT_NEAR(rep["top"][i]["score"].get<double>(), ref[rep["top"][i]["vertex"].get<std::size_t>()], 1e-12);
    sum += rep["top"][i]["score"].get<double>();
  }
  EXPECT_NEAR(sum, 1.0, 1e-9);
  const std::string top = testing_io::read_file(run.dir + "/top_k.txt");
  EXPECT_NE(top.find("\n" + std::to_string(want[0].first) + " "), std::string::npos) << top;
  EXPECT_EQ(std::count(top.begin(), top.end(), '\n'), 10);  // header + 9 vertices
}

TEST(PageRankLane, GeneratedRmatMatchesReference) {
  Edges edges;
  for_each_rmat_edge(10, 8, 7, [&](std::uint32_t s, std::uint32_t d) { edges.emplace_back(s, d); });
  ASSERT_EQ(edges.size(), 8192u);
  LaneEnv run("pagerank", {{"generate", "rmat"}, {"scale", "10"}, {"edge_factor", "8"}, {"seed", "7"},
                           {"slice_edges", "5000"}, {"tolerance", "1e-10"}});
  auto lane = make_pagerank_lane();
  lane->setup(run.ctx);
  run_to_end(*lane, run.ctx);
  ASSERT_TRUE(lane->finished());
  int ref_it = 0;
  const auto ref = reference_pagerank(1024, edges, 0.85, 1e-10, 100, &ref_it);
  const auto rep = lane->report();
  EXPECT_EQ(rep["iterations"], ref_it);
  const auto want = top_of(ref, 10);
  ASSERT_EQ(rep["top"].size(), 10u);
  for (std::size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(rep["top"][i]["vertex"].get<std::uint64_t>(), want[i].first) << i;
    EXPECT_NEAR(rep["top"][i]["score"].get<double>(), want[i].second, 1e-6) << i;
  }
  // R-MAT skews towards low ids: vertex 0 should be among the top.
  EXPECT_EQ(rep["top"][0]["vertex"], 0);
  EXPECT_GT(rep["dangling_vertices"].get<int>(), 0);
}

TEST(PageRankLane, SaveLoadMidIterationResumesExactly) {
  const std::map<std::string, std::string> opts = {{"generate", "rmat"}, {"scale", "9"}, {"edge_factor", "6"},
                                                   {"slice_edges", "777"}, {"top_k", "512"}};
  LaneEnv a("pagerank", opts);
  auto straight = make_pagerank_lane();
  straight->setup(a.ctx);
  run_to_end(*straight, a.ctx);

  LaneEnv b("pagerank", opts);
  auto first = make_pagerank_lane();
  first->setup(b.ctx);
  for (int i = 0; i < 13; ++i) first->step(b.ctx);  // 13*777 edges: inside iteration 3, mid-vertex
  const std::string state = first->save();
  first.reset();
  LaneEnv c("pagerank", opts);
  auto second = make_pagerank_lane();
  second->setup(c.ctx);
  second->load(state);
  run_to_end(*second, c.ctx);
  const auto want = straight->report(), got = second->report();
  EXPECT_EQ(got["iterations"], want["iterations"]);
  EXPECT_EQ(got["top"], want["top"]);  // bit-identical scores
  EXPECT_EQ(got["edges_processed"], want["edges_processed"]);
  EXPECT_EQ(testing_io::read_file(c.dir + "/top_k.txt"), testing_io::read_file(a.dir + "/top_k.txt"));

  // State of another graph is refused.
  LaneEnv d("pagerank", {{"generate", "rmat"}, {"scale", "8"}});
  auto other = make_pagerank_lane();
  other->setup(d.ctx);
  EXPECT_THROW(other->load(state), LaneError);
}

// precision = fp32: the step through Backend::pagerank_step (what a GPU runs), here on the CPU
// backend. Same graph as GeneratedRmatMatchesReference; fp32 ranks (rounding 2^-24 per operation,
// a few dozen per rank and iteration) within 1e-4 relative of the double reference, which is far
// below the gaps between the top scores it must order alike.
TEST(PageRankLane, Fp32StepThroughTheBackendMatchesReference) {
  Edges edges;
  for_each_rmat_edge(10, 8, 7, [&](std::uint32_t s, std::uint32_t d) { edges.emplace_back(s, d); });
  LaneEnv run("pagerank", {{"generate", "rmat"}, {"scale", "10"}, {"edge_factor", "8"}, {"seed", "7"},
                           {"slice_edges", "5000"}, {"tolerance", "1e-6"}, {"precision", "fp32"}});
  auto lane = make_pagerank_lane();
  EXPECT_TRUE(lane->runs_on_device());
  lane->setup(run.ctx);
  const int steps = run_to_end(*lane, run.ctx);
  ASSERT_TRUE(lane->finished());
  lane->teardown(run.ctx);
  int ref_it = 0;
  const auto ref = reference_pagerank(1024, edges, 0.85, 1e-6, 100, &ref_it);
  const auto rep = lane->report();
  EXPECT_EQ(rep["precision"], "fp32");
  EXPECT_TRUE(rep["converged"].get<bool>());
  EXPECT_LT(rep["residual"].get<double>(), 1e-6);
  EXPECT_NEAR(rep["iterations"].get<int>(), ref_it, 1);  // the residual crosses 1e-6 at about the same iteration
  // Each step a slice of whole vertices of at most ~5000 units: an iteration of 8192 edges and
  // 1024 vertices takes two steps.
  EXPECT_EQ(steps, 2 * rep["iterations"].get<int>());
  EXPECT_EQ(rep["edges_processed"].get<std::uint64_t>(), rep["iterations"].get<std::uint64_t>() * edges.size());
  const auto want = top_of(ref, 10);
  ASSERT_EQ(rep["top"].size(), 10u);
  for (std::size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(rep["top"][i]["vertex"].get<std::uint64_t>(), want[i].first) << i;
    EXPECT_NEAR(rep["top"][i]["score"].get<double>(), want[i].second, 1e-4 * want[i].second) << i;
  }
  const std::string top = testing_io::read_file(run.dir + "/top_k.txt");
  EXPECT_NE(top.find("\n" + std::to_string(want[0].first) + " "), std::string::npos) << top;
}

TEST(PageRankLane, Fp32SaveLoadMidIterationResumesExactly) {
  const std::map<std::string, std::string> opts = {{"generate", "rmat"}, {"scale", "9"}, {"edge_factor", "6"},
                                                   {"slice_edges", "777"}, {"top_k", "512"}, {"precision", "fp32"}};
  LaneEnv a("pagerank", opts);
  auto straight = make_pagerank_lane();
  straight->setup(a.ctx);
  run_to_end(*straight, a.ctx);
  straight->teardown(a.ctx);

  LaneEnv b("pagerank", opts);
  auto first = make_pagerank_lane();
  first->setup(b.ctx);
  for (int i = 0; i < 13; ++i) first->step(b.ctx);  // mid-iteration (an iteration is ~5 slices)
  const std::string state = first->save();
  first.reset();
  LaneEnv c("pagerank", opts);
  auto second = make_pagerank_lane();
  second->setup(c.ctx);
  second->load(state);
  run_to_end(*second, c.ctx);
  second->teardown(c.ctx);
  const auto want = straight->report(), got = second->report();
  EXPECT_EQ(got["iterations"], want["iterations"]);
  EXPECT_EQ(got["top"], want["top"]);  // bit-identical scores
  EXPECT_EQ(got["edges_processed"], want["edges_processed"]);
  EXPECT_EQ(testing_io::read_file(c.dir + "/top_k.txt"), testing_io::read_file(a.dir + "/top_k.txt"));

  // The fp64 step's state is not the fp32 one's, and the reverse; another slicing mid-iteration neither.
  LaneEnv d("pagerank", {{"generate", "rmat"}, {"scale", "9"}, {"edge_factor", "6"}});
  auto fp64 = make_pagerank_lane();
  fp64->setup(d.ctx);
  try {
    fp64->load(state);
    FAIL() << "fp32 state loaded into the fp64 step";
  } catch (const LaneError& e) {
    EXPECT_NE(std::string(e.what()).find("precision"), std::string::npos) << e.what();
  }
  fp64->step(d.ctx);
  auto fp32 = make_pagerank_lane();
  LaneEnv e("pagerank", opts);
  fp32->setup(e.ctx);
  EXPECT_THROW(fp32->load(fp64->save()), LaneError);
  auto resliced_opts = opts;
  resliced_opts["slice_edges"] = "1000";
  LaneEnv f("pagerank", resliced_opts);
  auto resliced = make_pagerank_lane();
  resliced->setup(f.ctx);
  EXPECT_THROW(resliced->load(state), LaneError);
}

TEST(PageRankLane, MalformedEdgeLineNamesFileAndLine) {
  LaneEnv env("pagerank", {});
  const std::string path = env.dir + "/bad.txt";
  testing_io::write_file(path, "# ok\n0 1\n1 x2\n");
  LaneEnv run("pagerank", {{"graph", path}});
  auto lane = make_pagerank_lane();
  try {
    lane->setup(run.ctx);
    FAIL() << "no error";
  } catch (const LaneError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ":3"), std::string::npos) << e.what();
  }
  testing_io::write_file(path, "0 1 2 3\n");  // a third column is a weight (graph/edge_source.h), a fourth is not
  EXPECT_THROW(make_pagerank_lane()->setup(run.ctx), LaneError);
  testing_io::write_file(path, "0 1 2.5\n1 0 1\n");  // weights: read, and ignored by pagerank
  EXPECT_NO_THROW(make_pagerank_lane()->setup(run.ctx));
  testing_io::write_file(path, "0 -1\n");
  EXPECT_THROW(make_pagerank_lane()->setup(run.ctx), LaneError);
  LaneEnv missing("pagerank", {{"graph", env.dir + "/nope.txt"}});
  EXPECT_THROW(make_pagerank_lane()->setup(missing.ctx), LaneError);
}

TEST(PageRankLane, OptionsAndQuotaAreEnforced) {
  LaneEnv unknown("pagerank", {{"generate", "rmat"}, {"scale", "4"}, {"dampnig", "0.9"}});
  EXPECT_THROW(make_pagerank_lane()->setup(unknown.ctx), LaneError);
  LaneEnv neither("pagerank", {});
  EXPECT_THROW(make_pagerank_lane()->setup(neither.ctx), LaneError);
  LaneEnv bad_damping("pagerank", {{"generate", "rmat"}, {"damping", "1.5"}});
  EXPECT_THROW(make_pagerank_lane()->setup(bad_damping.ctx), LaneError);
  LaneEnv bad_gen("pagerank", {{"generate", "kronecker"}});
  EXPECT_THROW(make_pagerank_lane()->setup(bad_gen.ctx), LaneError);
  LaneEnv bad_precision("pagerank", {{"generate", "rmat"}, {"scale", "4"}, {"precision", "fp16"}});
  try {
    make_pagerank_lane()->setup(bad_precision.ctx);
    FAIL() << "fp16 accepted";
  } catch (const LaneError& e) {
    EXPECT_NE(std::string(e.what()).find("test.ini: [lane.pagerank] precision = 'fp16'"), std::string::npos) << e.what();
  }
  // scale 16 x 16 edges needs ~6 MB of CSR + ranks: a 1 MB quota must refuse it, either step.
  for (const char* precision : {"fp64", "fp32"}) {
    LaneEnv small("pagerank", {{"generate", "rmat"}, {"scale", "16"}, {"precision", precision}}, 1u << 20);
    try {
      make_pagerank_lane()->setup(small.ctx);
      FAIL() << "no quota error (" << precision << ")";
    } catch (const LaneError& e) {
      EXPECT_NE(std::string(e.what()).find("quota"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace pipelane

// Step durations of the three lanes at their default sizes (a benchmark, not run by ctest):
//   test_lanes_builtin_io --gtest_also_run_disabled_tests --gtest_filter='*StepTimes*'
#include <chrono>

#include "lanes/builtin/command_lane.h"
#include "lanes/builtin/imageproc_lane.h"

namespace pipelane {
namespace {

void time_steps(const char* what, Lane& lane, LaneContext& ctx, int steps) {
  double worst = 0, total = 0, work = 0;
  int n = 0;
  for (; n < steps && !lane.finished(); ++n) {
    const auto t0 = std::chrono::steady_clock::now();
    work += lane.step(ctx);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    worst = std::max(worst, ms);
    total += ms;
  }
  std::printf("%-44s %4d steps  mean %7.3f ms  max %7.3f ms  %.0f %s\n", what, n, total / n, worst, work,
              lane.work_unit().c_str());
}

TEST(BuiltinIoBench, DISABLED_StepTimes) {
  LaneEnv pr("pagerank", {{"generate", "rmat"}}, 256u << 20);
  auto p = make_pagerank_lane();
  auto t0 = std::chrono::steady_clock::now();
  p->setup(pr.ctx);
  std::printf("pagerank rmat scale 16 setup: %.1f ms\n",
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  time_steps("pagerank rmat scale 16, slice_edges 2^21", *p, pr.ctx, 100000);
  std::printf("  iterations %d converged %d\n", p->report()["iterations"].get<int>(),
              p->report()["converged"].get<bool>() ? 1 : 0);
  LaneEnv ip("imageproc", {{"generate", "20"}}, 64u << 20);
  LaneEnv ip2("imageproc", {{"generate", "20"}, {"format", "ppm"}, {"blur", "0"}}, 64u << 20);
  auto i2 = make_imageproc_lane();
  i2->setup(ip2.ctx);
  time_steps("imageproc 640x480 -> 320x240 ppm, no blur", *i2, ip2.ctx, 20);
  auto i = make_imageproc_lane();
  i->setup(ip.ctx);
  time_steps("imageproc 640x480 -> 320x240 png, blur 1", *i, ip.ctx, 20);
  LaneEnv cm("command", {{"command", "while :; do :; done"}});
  auto c = make_command_lane();
  c->setup(cm.ctx);
  time_steps("command busy loop, slice_ms 5", *c, cm.ctx, 40);
  std::printf("  cpu in gaps %.0f ms, outside %.0f ms\n", c->report()["cpu_ms_in_gaps"].get<double>(),
              c->report()["cpu_ms_outside_gaps"].get<double>());
  c->teardown(cm.ctx);
}

}  // namespace
}  // namespace pipelane
