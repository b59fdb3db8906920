// The graph lanes' kernels (kernels/bfs.cuh, graphsgd.cuh, launched by cuda_kernels_graph.cu's
// launchers), emulated, against the references of graph_reference.h, with guard zones around every
// buffer (an out-of-bounds write fails) and two runs bit-identical; this file also runs under the
// sanitizers (data races between the threads of a block, out-of-bounds accesses). Parity with the
// CPU backend is test_cuda_graph_ops.cpp's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "runtime/cuda/cuda_kernels_graph.cu"
#include "tests/cuda/graph_reference.h"
#include "tests/cuda/kernel_check.h"

// A namespace of its own: the emulated test executables are unity builds.
namespace pipelane::cuda_test::graph_kernels_test {
namespace {

using namespace graph_reference;

struct BfsResult {
  std::vector<std::int32_t> depth;
  std::vector<BfsTraversalRecord> records;
  std::vector<std::uint64_t> level_sizes;
  BfsState state;
};

BfsResult run_bfs(const Rows& g, const std::vector<std::uint32_t>& ends, std::uint64_t first, std::int64_t traversals) {
  const std::uint32_t n = g.n;
  const auto cap = static_cast<std::uint32_t>(traversals);
  Guarded<std::uint64_t> off(g.offsets);
  Guarded<std::uint32_t> src(g.others);
  Guarded<std::int32_t> depth[2] = {Guarded<std::int32_t>(std::vector<std::int32_t>(n, -9)),
                                    Guarded<std::int32_t>(std::vector<std::int32_t>(n, -9))};
  BfsState initial;
  initial.source = first;
  Guarded<BfsState> state(std::vector<BfsState>{initial});
  Guarded<BfsTraversalRecord> records(std::vector<BfsTraversalRecord>(cap, BfsTraversalRecord{0, 0, 0, 0}));
  Guarded<std::uint64_t> levels(std::vector<std::uint64_t>(std::size_t{cap} * kBfsRecordedLevels, 0));
  for (std::uint64_t pass = 0; state.data()->done == 0 && pass < traversals * (n + 1ull); ++pass) {
    const int in = static_cast<int>(pass % 2);
    std::uint32_t begin = 0;
    for (const std::uint32_t end : ends) {
      cuda::bfs_step(BfsStep{off.data(), src.data(), n, depth[in].data(), depth[1 - in].data(), state.data(),
                             records.data(), levels.data(), cap, first, traversals, begin, end},
                     nullptr);
      begin = end;
    }
  }
  EXPECT_TRUE(intact("offsets", off));
  EXPECT_TRUE(intact("sources", src));
  EXPECT_TRUE(intact("depth 0", depth[0]));
  EXPECT_TRUE(intact("depth 1", depth[1]));
  EXPECT_TRUE(intact("state", state));
  EXPECT_TRUE(intact("records", records));
  EXPECT_TRUE(intact("level sizes", levels));
  const BfsState s = *state.data();
  return BfsResult{depth[s.passes % 2].values(), records.values(), levels.values(), s};
}

TEST(GraphKernels, BfsPassesGiveTheSerialBfsAndTheSameBitsTwice) {
  const Rows g = rmat_rows(kSanitizer ? 4 : 6, 4, 11, /*by_source=*/false, /*undirected=*/true);
  const std::uint32_t n = g.n;
  const std::int64_t traversals = 2;
  const std::vector<std::uint32_t> ends = {1, 13, n - 1, n};
  const BfsResult got = run_bfs(g, ends, 0, traversals), again = run_bfs(g, ends, 0, traversals);
  EXPECT_EQ(got.depth, again.depth);
  EXPECT_TRUE(std::memcmp(&got.state, &again.state, sizeof(BfsState)) == 0) << "two runs differ";
  EXPECT_EQ(got.level_sizes, again.level_sizes);
  ASSERT_EQ(got.state.done, 1u);
  EXPECT_EQ(got.state.traversal, traversals);
  for (std::int64_t t = 0; t < traversals; ++t) {
    const std::vector<std::int32_t> d = reference_depths(g, static_cast<std::uint32_t>(t));
    std::uint64_t reached = 0;
    std::int32_t deepest = 0;
    for (const std::int32_t x : d) {
      reached += x >= 0;
      deepest = std::max(deepest, x);
    }
    EXPECT_EQ(got.records[t].reached, reached) << "traversal " << t;
    EXPECT_EQ(got.records[t].levels, static_cast<std::uint64_t>(deepest) + 1) << "traversal " << t;
    if (t == traversals - 1) {
      EXPECT_EQ(got.depth, d);
    }
  }
  EXPECT_GT(got.records[0].reached, 4u);
}

struct SgdResult {
  std::vector<float> user, item;
  GraphSgdState state;
};

SgdResult run_sgd(const SgdData& d, const std::vector<std::uint64_t>& cuts) {
  const auto m = static_cast<std::uint64_t>(d.g.others.size());
  Guarded<std::uint64_t> off(d.g.offsets);
  Guarded<std::uint32_t> items(d.g.others);
  Guarded<float> ratings(d.ratings), user(d.user), item(d.item);
  Guarded<GraphSgdState> state(std::vector<GraphSgdState>(1));
  Guarded<double> history(std::vector<double>(1, 0.0));
  for (std::uint32_t pass = 0; pass < 2; ++pass) {
    std::uint64_t begin = 0;
    std::vector<std::uint64_t> ends = cuts;
    ends.push_back(m);
    for (const std::uint64_t end : ends) {
      cuda::graphsgd_step(GraphSgdStep{off.data(), items.data(), ratings.data(), d.g.n, m, user.data(), item.data(), d.K,
                                       kRate, kLambda, state.data(), history.data(), 1, 0.0, 5, pass, 0, begin, end},
                          nullptr);
      begin = end;
    }
  }
  for (const Guarded<float>* b : {&ratings, &user, &item}) EXPECT_TRUE(intact("sgd buffer", *b));
  EXPECT_TRUE(intact("offsets", off));
  EXPECT_TRUE(intact("items", items));
  EXPECT_TRUE(intact("state", state));
  EXPECT_TRUE(intact("history", history));
  return SgdResult{user.values(), item.values(), *state.data()};
}

TEST(GraphKernels, SgdIterationWithinTheDerivedBoundAndTheSameBitsTwice) {
  for (const int K : kSanitizer ? std::vector<int>{8} : std::vector<int>{8, 40}) {
    SCOPED_TRACE("K = " + std::to_string(K));
    const SgdData d = sgd_data(K, 5, 4);
    const auto m = static_cast<std::uint64_t>(d.g.others.size());
    const SgdResult got = run_sgd(d, {2, m / 3}), again = run_sgd(d, {});
    EXPECT_TRUE(std::memcmp(got.user.data(), again.user.data(), got.user.size() * sizeof(float)) == 0);
    EXPECT_TRUE(std::memcmp(got.item.data(), again.item.data(), got.item.size() * sizeof(float)) == 0);
    const SgdReference ref = reference_sgd(d);
    for (std::size_t i = 0; i < ref.user.size(); ++i) {
      ASSERT_LE(std::fabs(got.user[i] - ref.user[i]), ref.user_bound[i] + std::ldexp(std::fabs(ref.user[i]), -40)) << i;
      ASSERT_LE(std::fabs(got.item[i] - ref.item[i]), ref.item_bound[i] + std::ldexp(std::fabs(ref.item[i]), -40)) << i;
    }
    EXPECT_EQ(got.state.iterations, 1);
    EXPECT_EQ(got.state.edges, 2 * m);
    const double rmse = std::sqrt(ref.squared_error / m);
    EXPECT_NEAR(got.state.rmse, rmse, (ref.squared_error_bound + std::ldexp(ref.squared_error, -40)) / (m * rmse));
  }
}

}  // namespace
}  // namespace pipelane::cuda_test::graph_kernels_test
