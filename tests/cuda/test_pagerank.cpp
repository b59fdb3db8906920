// The pagerank lane's device step (kernels/pagerank.cuh), emulated, against the CPU step in fp32
// over the same CSR in the same order (bit for bit: one thread per vertex, plain adds, one fused
// multiply-add on both sides) and against a double reference within the fp32 summation bound:
// |sum - exact| <= (deg + 2) * 2^-24 * (base + damping * sum |contrib|) for a vertex of in-degree
// deg (deg - 1 additions, the fma, the division each at most one rounding of a value no larger
// than that). Odd sizes: one vertex, slices whose ends are not multiples of the block, isolated
// and dangling vertices, a hub with hundreds of in-edges; vertices outside the slice untouched.
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

struct Step {
  std::vector<float> rank, contrib, delta;
};

// The CPU step in fp32: the same sums in the same order.
Step cpu_step(const Graph& g, const std::vector<float>& rank_in, const std::vector<float>& contrib, float base,
              std::uint32_t v0, std::uint32_t v1) {
  const std::size_t n = rank_in.size();
  Step out{std::vector<float>(n, kUntouched), std::vector<float>(n, kUntouched), std::vector<float>(n, kUntouched)};
  for (std::uint32_t v = v0; v < v1; ++v) {
    float acc = 0.0f;
    for (std::uint64_t e = g.offsets[v]; e < g.offsets[v + 1]; ++e) acc += contrib[g.sources[e]];
    const float r = std::fmaf(kDamping, acc, base);
    out.rank[v] = r;
    out.contrib[v] = g.out_degree[v] == 0 ? 0.0f : r / static_cast<float>(g.out_degree[v]);
    out.delta[v] = std::fabs(r - rank_in[v]);
  }
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(PagerankStep, MatchesTheCpuStepBitForBitAndTheDoubleReference) {
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
    const float base = (1.0f - kDamping) / static_cast<float>(n);
    // Slices with ends that are not multiples of the block; the whole range as one slice too.
    std::vector<std::pair<std::uint32_t, std::uint32_t>> slices = {{0, n}};
    if (n > 10) slices.push_back({3, n - 5});
    for (const auto& [v0, v1] : slices) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " slice [" << v0 << ", " << v1 << ")");
      const auto run = [&] {
        Guarded<float> r(std::vector<float>(n, kUntouched)), c(std::vector<float>(n, kUntouched)),
            d(std::vector<float>(n, kUntouched));
        Guarded<float> gr(rank_in), gc(contrib);
        Guarded<std::uint64_t> off(g.offsets);
        Guarded<std::uint32_t> src(g.sources.empty() ? std::vector<std::uint32_t>{0} : g.sources),
            deg(g.out_degree);
        cuda::pagerank_step(r.data(), c.data(), d.data(), gr.data(), gc.data(), off.data(), src.data(), deg.data(),
                            base, kDamping, v0, v1, nullptr);
        for (const Guarded<float>* buf : {&r, &c, &d, &gr, &gc}) EXPECT_TRUE(intact("pagerank buffer", *buf));
        EXPECT_TRUE(intact("offsets", off));
        EXPECT_TRUE(intact("sources", src));
        EXPECT_TRUE(intact("out_degree", deg));
        return Step{r.values(), c.values(), d.values()};
      };
      const Step got = run(), again = run();
      const Step want = cpu_step(g, rank_in, contrib, base, v0, v1);
      EXPECT_TRUE(same_bits(got.rank, want.rank));
      EXPECT_TRUE(same_bits(got.contrib, want.contrib));
      EXPECT_TRUE(same_bits(got.delta, want.delta));
      EXPECT_TRUE(same_bits(got.rank, again.rank)) << "two runs differ";
      for (std::uint32_t v = v0; v < v1; ++v) {
        double exact = 0, magnitude = 0;
        for (std::uint64_t e = g.offsets[v]; e < g.offsets[v + 1]; ++e) {
          exact += contrib[g.sources[e]];
          magnitude += std::fabs(contrib[g.sources[e]]);
        }
        const double deg = static_cast<double>(g.offsets[v + 1] - g.offsets[v]);
        const double bound = (deg + 2) * std::ldexp(1.0, -24) * (base + kDamping * magnitude);
        ASSERT_NEAR(got.rank[v], base + kDamping * exact, bound) << "vertex " << v;
      }
    }
  }
}

}  // namespace
}  // namespace pipelane::cuda_test::pagerank_test
