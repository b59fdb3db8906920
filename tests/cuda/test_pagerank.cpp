// PageRank's bounded step (kernels/pagerank.cuh, Backend::pagerank_step's kernels), emulated:
// one iteration run as several slices (ends not multiples of the block, an empty slice between
// them) against a double reference within the fp32 summation bound: |r - exact| <= (deg + 2) *
// 2^-24 * (base + damping * sum |contrib|) for a vertex of in-degree deg (deg - 1 additions, the
// fma, base's own rounding, each at most one rounding of a value no larger than that); the
// iteration's state (residual, dangling rank, base, edges, done) against the same reference; two
// runs bit-identical; a step after `done`, and an empty slice, change nothing. Odd sizes: one
// vertex, isolated and dangling vertices, a hub with hundreds of in-edges. Bit-for-bit parity with
// the CPU backend is tests/cuda/test_cuda_pagerank_op.cpp's (this file also runs under the
// sanitizers, which have no CPU backend).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "runtime/cuda/kernels/pagerank.cuh"
#include "tests/cuda/kernel_check.h"

// A namespace of its own: the emulated test executables are unity builds.
namespace pipelane::cuda_test::pagerank_test {
namespace {

constexpr float kDamping = 0.85f;
constexpr float kUntouched = -7.0f;

struct Graph {
  std::vector<std::uint64_t> offsets;  // CSR by destination: in-edges of v at [offsets[v], offsets[v+1])
  std::vector<std::uint32_t> sources;
  std::vector<std::uint32_t> out_degree;
};

// Random in-edges (some vertices with none), vertex 0 a hub when there is room.
Graph random_graph(std::uint32_t n, std::mt19937& rng) {
  Graph g;
  g.offsets.push_back(0);
  g.out_degree.assign(n, 0);
  std::uniform_int_distribution<std::uint32_t> pick(0, n - 1);
  for (std::uint32_t v = 0; v < n; ++v) {
    const std::uint32_t deg = v == 0 && n > 8 ? 300 : (v % 5 == 3 ? 0 : rng() % 9);
    for (std::uint32_t k = 0; k < deg; ++k) {
      const std::uint32_t u = pick(rng);
      g.sources.push_back(u);
      ++g.out_degree[u];
    }
    g.offsets.push_back(g.sources.size());
  }
  return g;
}

bool same_bytes(const void* a, const void* b, std::size_t n) { return std::memcmp(a, b, n) == 0; }

struct StepResult {
  std::vector<float> rank, contrib, delta;
  PagerankState state;
};

// The device buffers of one graph and iteration input; run() steps the given slices in order.
struct Buffers {
  Buffers(const Graph& g, const std::vector<float>& rank_in, const std::vector<float>& contrib)
      : n(static_cast<std::uint32_t>(rank_in.size())), rank_out(std::vector<float>(n, kUntouched)),
        contrib_out(std::vector<float>(n, kUntouched)), delta(std::vector<float>(n, kUntouched)), rin(rank_in),
        cin(contrib), off(g.offsets),
        src(g.sources.empty() ? std::vector<std::uint32_t>{0} : g.sources), deg(g.out_degree), state(1) {}
  PagerankStep args(std::uint32_t v0, std::uint32_t v1, std::int64_t max_iterations) {
    return PagerankStep{off.data(), src.data(), deg.data(), n, rin.data(), cin.data(), rank_out.data(),
                        contrib_out.data(), delta.data(), state.data(), kDamping, 0.0, max_iterations, v0, v1};
  }
  StepResult run(const std::vector<std::pair<std::uint32_t, std::uint32_t>>& slices, const PagerankState& initial,
          std::int64_t max_iterations = 100) {
    *state.data() = initial;
    for (const auto& [v0, v1] : slices) cuda::pagerank_step<float>(args(v0, v1, max_iterations), nullptr);
    for (const Guarded<float>* b : {&rank_out, &contrib_out, &delta, &rin, &cin}) EXPECT_TRUE(intact("pagerank buffer", *b));
    EXPECT_TRUE(intact("offsets", off));
    EXPECT_TRUE(intact("sources", src));
    EXPECT_TRUE(intact("out_degree", deg));
    EXPECT_TRUE(intact("state", state));
    return StepResult{rank_out.values(), contrib_out.values(), delta.values(), *state.data()};
  }
  std::uint32_t n;
  Guarded<float> rank_out, contrib_out, delta, rin, cin;
  Guarded<std::uint64_t> off;
  Guarded<std::uint32_t> src, deg;
  Guarded<PagerankState> state;
};

TEST(PagerankStep, AnIterationInSlicesMatchesTheDoubleReference) {
  const std::vector<std::uint32_t> sizes =
      kSanitizer ? std::vector<std::uint32_t>{1, 37} : std::vector<std::uint32_t>{1, 37, 1000 + 3, 4099};
  for (const std::uint32_t n : sizes) {
    std::mt19937 rng(n);
    const Graph g = random_graph(n, rng);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    std::vector<float> rank_in(n), contrib(n);
    for (std::uint32_t v = 0; v < n; ++v) {
      rank_in[v] = unit(rng) / static_cast<float>(n);
      contrib[v] = g.out_degree[v] == 0 ? 0.0f : rank_in[v] / static_cast<float>(g.out_degree[v]);
    }
    PagerankState initial;
    initial.base = (1.0f - kDamping) / static_cast<float>(n);
    initial.residual_sum = 0.25;  // carried in from earlier slices of the iteration
    initial.dangling_sum = 0.125;
    // Ends that are not multiples of the block; an empty slice; the last one ends the iteration.
    std::vector<std::pair<std::uint32_t, std::uint32_t>> slices = {{0, n}};
    if (n > 10) slices = {{0, 3}, {3, 3}, {3, n - 5}, {n - 5, n}};
    SCOPED_TRACE(::testing::Message() << "n=" << n << ", " << slices.size() << " slices");
    Buffers bufs(g, rank_in, contrib);
    const StepResult got = bufs.run(slices, initial), again = bufs.run(slices, initial);
    EXPECT_TRUE(same_bytes(got.rank.data(), again.rank.data(), n * sizeof(float))) << "two runs differ";
    EXPECT_TRUE(same_bytes(got.contrib.data(), again.contrib.data(), n * sizeof(float)));
    EXPECT_TRUE(same_bytes(got.delta.data(), again.delta.data(), n * sizeof(float)));
    EXPECT_TRUE(same_bytes(&got.state, &again.state, sizeof(PagerankState)));

    double residual = initial.residual_sum, dangling = initial.dangling_sum;
    for (std::uint32_t v = 0; v < n; ++v) {
      double exact = 0, magnitude = 0;
      for (std::uint64_t e = g.offsets[v]; e < g.offsets[v + 1]; ++e) {
        exact += contrib[g.sources[e]];
        magnitude += std::fabs(contrib[g.sources[e]]);
      }
      const double deg = static_cast<double>(g.offsets[v + 1] - g.offsets[v]);
      const double bound = (deg + 2) * std::ldexp(1.0, -24) * (initial.base + kDamping * magnitude);
      const double want = initial.base + kDamping * exact;
      ASSERT_NEAR(got.rank[v], want, bound) << "vertex " << v;
      if (g.out_degree[v] == 0) {
        EXPECT_EQ(got.contrib[v], 0.0f) << "vertex " << v;
        dangling += got.rank[v];
      } else {  // the division: one more rounding
        EXPECT_NEAR(got.contrib[v], want / g.out_degree[v], (bound + std::ldexp(want, -24)) / g.out_degree[v]);
      }
      EXPECT_EQ(got.delta[v], std::fabs(got.rank[v] - rank_in[v])) << "vertex " << v;
      residual += got.delta[v];
    }
    // The state's sums are double sums of the fp32 outputs (other order than ours): within n double
    // roundings of them; base one float rounding more.
    const double eps = (n + 2) * std::ldexp(1.0, -53);
    EXPECT_NEAR(got.state.residual, residual, eps * residual);
    EXPECT_EQ(got.state.iterations, 1);
    EXPECT_EQ(got.state.edges, g.sources.size());
    EXPECT_EQ(got.state.residual_sum, 0.0);
    EXPECT_EQ(got.state.dangling_sum, 0.0);
    EXPECT_EQ(got.state.done, 0u);  // tolerance 0: only max_iterations ends it
    const double base = (1.0 - kDamping) / n + kDamping * dangling / n;
    EXPECT_NEAR(got.state.base, base, std::ldexp(base, -24) + eps * base);

    // max_iterations 1: this iteration ends the run; a step after it changes nothing.
    const StepResult last = bufs.run(slices, initial, 1);
    EXPECT_EQ(last.state.done, 1u);
    const StepResult after = bufs.run({slices.front()}, last.state, 1);
    EXPECT_TRUE(same_bytes(&after.state, &last.state, sizeof(PagerankState)));
    EXPECT_TRUE(same_bytes(after.rank.data(), last.rank.data(), n * sizeof(float))) << "a step after done wrote";
  }
}

TEST(PagerankStep, AnEmptySliceDoesNothing) {
  std::mt19937 rng(5);
  const Graph g = random_graph(37, rng);
  Buffers bufs(g, std::vector<float>(37, 1.0f / 37), std::vector<float>(37, 0.01f));
  PagerankState initial;
  initial.base = 0.5f;
  const StepResult got = bufs.run({{37, 37}, {10, 10}}, initial);
  EXPECT_TRUE(same_bytes(&got.state, &initial, sizeof(PagerankState)));
  for (std::uint32_t v = 0; v < 37; ++v) EXPECT_EQ(got.rank[v], kUntouched) << v;
}

}  // namespace
}  // namespace pipelane::cuda_test::pagerank_test
