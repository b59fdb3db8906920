// graphsgd against a straightforward SGD over the edge list, sliced and resumed.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <cmath>
#include <vector>

#include "lanes/builtin/builtin_lanes.h"
#include "lanes/builtin/graph/rmat.h"
#include "lanes/builtin/graphsgd_lane.h"
#include "tests/lanes/builtin_io_test_env.h"

namespace pipelane {
namespace {

using testing_io::LaneEnv;
struct Rating {
  std::uint32_t u, v;
  float r;
};

// Gardenia's serial SGD, written out: edges sorted by user (stably: file order within a user),
// every edge updates both vectors from their old values; then the RMSE over all edges.
std::vector<double> reference_rmse(std::vector<Rating> edges, std::uint64_t n, int K, float step, float lambda,
                                   int iterations, std::uint64_t init_seed) {
  std::stable_sort(edges.begin(), edges.end(), [](const Rating& a, const Rating& b) { return a.u < b.u; });
  std::vector<std::vector<float>> p(n, std::vector<float>(K)), q(n, std::vector<float>(K));
  for (std::uint64_t v = 0; v < n; ++v)
    for (int k = 0; k < K; ++k) {
      p[v][k] = graphsgd_initial_latent(init_seed, false, v, k, K);
      q[v][k] = graphsgd_initial_latent(init_seed, true, v, k, K);
    }
  auto dot = [&](std::uint32_t u, std::uint32_t v) {
    float s = 0;
    for (int k = 0; k < K; ++k) s += p[u][k] * q[v][k];
    return s;
  };
  std::vector<double> rmse;
  for (int it = 0; it < iterations; ++it) {
    for (const Rating& e : edges) {
      const float err = e.r - dot(e.u, e.v);
      for (int k = 0; k < K; ++k) {
        const float pk = p[e.u][k], qk = q[e.v][k];
        p[e.u][k] = pk + step * (err * qk - lambda * pk);
        q[e.v][k] = qk + step * (err * pk - lambda * qk);
      }
    }
    double sum = 0;
    for (const Rating& e : edges) {
      const double err = e.r - dot(e.u, e.v);
      sum += err * err;
    }
    rmse.push_back(std::sqrt(sum / edges.size()));
  }
  return rmse;
}

void run_to_end(Lane& lane, LaneContext& ctx) {
  for (int steps = 0; !lane.finished() && steps < 1000000; ++steps) lane.step(ctx);
}

// The lane and the reference do the same float operations in the same order; the compiler may
// contract a*b+c into an FMA differently in the two (-march=native), one rounding less per
// multiply-add (2^-24 relative). Over a few iterations the SGD's updates damp such differences
// rather than grow them (step * |q|^2 << 1), so 1e-4 relative (~2000 ulps) on the RMSE is ample
// and still far below what one edge out of order or a wrong update changes (checked below).
constexpr double kRmseRelTolerance = 1e-4;

void expect_rmse_near(const nlohmann::json& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i].get<double>(), want[i], kRmseRelTolerance * want[i]) << "iteration " << i;
}

TEST(GraphSgdLane, WeightedFileMatchesReference) {
  LaneEnv env("graphsgd", {});
  const std::string path = env.dir + "/ratings.txt";
  testing_io::write_file(path, "# user item rating\n0 1 5\n0 2 3\n1 2 4\n2 0 1\n3 2 2\n3 4 5\n4 5 4\n6 3 3\n0 2 1\n");
  const std::vector<Rating> edges = {{0, 1, 5}, {0, 2, 3}, {1, 2, 4}, {2, 0, 1}, {3, 2, 2},
                                     {3, 4, 5}, {4, 5, 4}, {6, 3, 3}, {0, 2, 1}};
  LaneEnv run("graphsgd", {{"graph", path}, {"slice_edges", "2"}, {"iterations", "40"}, {"learning_rate", "0.05"},
                           {"latent_dim", "8"}});
  auto lane = builtin_lane_factories().at("graphsgd")();
  lane->setup(run.ctx);
  EXPECT_EQ(lane->work_unit(), "edges");
  EXPECT_TRUE(lane->runs_on_device());  // on a device backend it runs the backend step there
  double units = 0;
  for (int steps = 0; !lane->finished(); ++steps) {
    const double u = lane->step(run.ctx);
    EXPECT_LE(u, 2.0);  // bounded: never more than slice_edges edges in a step
    units += u;
    ASSERT_LT(steps, 100000);
  }
  const auto rep = lane->report();
  EXPECT_EQ(units, 40.0 * 2 * 9);  // both passes of 40 iterations over 9 edges
  EXPECT_EQ(rep["iterations"], 40);
  EXPECT_EQ(rep["ratings"], "the file's third column");
  const auto want = reference_rmse(edges, 7, 8, 0.05f, 0.05f, 40, 1);
  expect_rmse_near(rep["rmse"], want);
  EXPECT_LT(want.back(), 0.5 * want.front());  // it learns: the fit improves a lot on 9 ratings
  // Another edge order gives another result, far outside the tolerance: the order is what's fixed.
  std::vector<Rating> swapped = edges;
  std::swap(swapped[0], swapped[1]);
  const auto other = reference_rmse(swapped, 7, 8, 0.05f, 0.05f, 40, 1);
  double largest = 0;
  for (std::size_t i = 0; i < want.size(); ++i) largest = std::max(largest, std::fabs(other[i] - want[i]) / want[i]);
  EXPECT_GT(largest, 10 * kRmseRelTolerance);
}

TEST(GraphSgdLane, UnweightedRmatGetsHashedRatingsAndMatchesReference) {
  std::vector<Rating> edges;
  for_each_rmat_edge(8, 4, 5, [&](std::uint32_t s, std::uint32_t d) {
    edges.push_back({s, d, graphsgd_hashed_rating(s, d)});
  });
  LaneEnv run("graphsgd", {{"generate", "rmat"}, {"scale", "8"}, {"edge_factor", "4"}, {"seed", "5"},
                           {"slice_edges", "333"}, {"iterations", "5"}, {"init_seed", "9"}});
  auto lane = make_graphsgd_lane();
  lane->setup(run.ctx);
  run_to_end(*lane, run.ctx);
  ASSERT_TRUE(lane->finished());
  const auto rep = lane->report();
  EXPECT_EQ(rep["edges"], 1024);
  expect_rmse_near(rep["rmse"], reference_rmse(edges, 256, 16, 0.005f, 0.05f, 5, 9));
  for (const Rating& e : edges) ASSERT_TRUE(e.r >= 1 && e.r <= 5 && e.r == std::floor(e.r));
}

TEST(GraphSgdLane, SaveLoadInEitherPassResumesExactly) {
  const std::map<std::string, std::string> opts = {{"generate", "rmat"}, {"scale", "7"}, {"edge_factor", "6"},
                                                   {"slice_edges", "100"}, {"iterations", "3"}, {"tolerance", "0"}};
  LaneEnv a("graphsgd", opts);
  auto straight = make_graphsgd_lane();
  straight->setup(a.ctx);
  run_to_end(*straight, a.ctx);
  // 768 edges: a pass is 8-9 steps of 100; step 12 is inside the first RMSE pass, 20 inside the
  // second update pass (both mid-row).
  for (int stop : {12, 20}) {
    LaneEnv b("graphsgd", opts);
    auto first = make_graphsgd_lane();
    first->setup(b.ctx);
    for (int i = 0; i < stop; ++i) first->step(b.ctx);
    const std::string state = first->save();
    LaneEnv c("graphsgd", opts);
    auto second = make_graphsgd_lane();
    second->setup(c.ctx);
    second->load(state);
    run_to_end(*second, c.ctx);
    EXPECT_EQ(second->report(), straight->report()) << "stopped after " << stop;  // bit-identical RMSEs
  }
  LaneEnv d("graphsgd", {{"generate", "rmat"}, {"scale", "6"}});
  auto other = make_graphsgd_lane();
  other->setup(d.ctx);
  EXPECT_THROW(other->load(straight->save()), LaneError);
}

// step = backend on the CPU backend: Backend::graphsgd_step is the host loop, so the same bits,
// and both steps save the same state: a state saved mid-pass by either resumes in the other.
TEST(GraphSgdLane, BackendStepOnTheCpuGivesTheHostLoopsBitsAndStatesCrossOver) {
  std::map<std::string, std::string> opts = {{"generate", "rmat"}, {"scale", "7"}, {"edge_factor", "6"},
                                             {"slice_edges", "100"}, {"iterations", "3"}, {"latent_dim", "12"}};
  LaneEnv a("graphsgd", opts);
  auto host = make_graphsgd_lane();
  host->setup(a.ctx);
  run_to_end(*host, a.ctx);
  auto backend_opts = opts;
  backend_opts["step"] = "backend";
  LaneEnv b("graphsgd", backend_opts);
  auto backend = make_graphsgd_lane();
  backend->setup(b.ctx);
  double units = 0;
  for (int steps = 0; !backend->finished() && steps < 100000; ++steps) {
    const double u = backend->step(b.ctx);
    EXPECT_LE(u, 100.0);
    units += u;
  }
  EXPECT_EQ(units, 3.0 * 2 * 768);
  EXPECT_EQ(backend->save(), host->save());  // vectors, RMSEs, counters: every bit
  auto want = host->report(), got = backend->report();
  EXPECT_NE(got["step"].get<std::string>().find("Backend::graphsgd_step"), std::string::npos);
  want.erase("step");
  got.erase("step");
  EXPECT_EQ(got, want);

  for (const bool host_first : {true, false}) {
    for (int stop : {12, 20}) {  // inside the first RMSE pass, inside the second update pass
      LaneEnv c("graphsgd", host_first ? opts : backend_opts);
      auto first = make_graphsgd_lane();
      first->setup(c.ctx);
      for (int i = 0; i < stop; ++i) first->step(c.ctx);
      const std::string state = first->save();
      LaneEnv d("graphsgd", host_first ? backend_opts : opts);
      auto second = make_graphsgd_lane();
      second->setup(d.ctx);
      second->load(state);
      run_to_end(*second, d.ctx);
      EXPECT_EQ(second->save(), host->save()) << (host_first ? "host -> backend" : "backend -> host") << " at " << stop;
    }
  }
  LaneEnv bad("graphsgd", {{"generate", "rmat"}, {"scale", "4"}, {"step", "gpu"}});
  EXPECT_THROW(make_graphsgd_lane()->setup(bad.ctx), LaneError);
}

TEST(GraphSgdLane, MixedRatingsAndSmallQuotaAreRefused) {
  LaneEnv env("graphsgd", {});
  testing_io::write_file(env.dir + "/mixed.txt", "0 1 5\n1 2\n");
  LaneEnv mixed("graphsgd", {{"graph", env.dir + "/mixed.txt"}});
  EXPECT_THROW(make_graphsgd_lane()->setup(mixed.ctx), LaneError);
  LaneEnv small("graphsgd", {{"generate", "rmat"}, {"scale", "16"}}, 1u << 20);
  EXPECT_THROW(make_graphsgd_lane()->setup(small.ctx), LaneError);
  LaneEnv unknown("graphsgd", {{"generate", "rmat"}, {"scale", "4"}, {"rank", "3"}});
  EXPECT_THROW(make_graphsgd_lane()->setup(unknown.ctx), LaneError);
}

}  // namespace
}  // namespace pipelane
