// Backend::pagerank_step on the emulated CUDA backend (deferred streams) against the CPU backend,
// bit for bit: ranks, contributions, deltas and the iteration state over several iterations run
// as slices of odd sizes (ends not multiples of the block, an empty slice, one vertex), with
// isolated vertices, vertices without out-edges (their rank spread as the dangling mass) and a hub;
// then a run that stops at max_iterations and steps after it that must change nothing.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cuda/emu/emulated_backend.h"
#include "runtime/cuda/emu/fake_cuda_runtime.h"

namespace pipelane::cuda_test {
namespace {

using Slices = std::vector<std::pair<std::uint32_t, std::uint32_t>>;

struct Csr {
  std::vector<std::uint64_t> offsets{0};
  std::vector<std::uint32_t> sources, out_degree;
};

// In-edges of v drawn at random; every 5th vertex none, every 7th no out-edges, vertex 0 a hub.
Csr random_csr(std::uint32_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Csr g;
  g.out_degree.assign(n, 0);
  std::uniform_int_distribution<std::uint32_t> pick(0, n - 1);
  for (std::uint32_t v = 0; v < n; ++v) {
    const std::uint32_t deg = v == 0 && n > 8 ? 400 : (v % 5 == 3 ? 0 : rng() % 11);
    for (std::uint32_t k = 0; k < deg; ++k) {
      std::uint32_t u = pick(rng);
      if (n > 1 && u % 7 == 6) u = (u + 1) % n;  // keeps every 7th vertex without out-edges
      g.sources.push_back(u);
      ++g.out_degree[u];
    }
    g.offsets.push_back(g.sources.size());
  }
  return g;
}

struct Result {
  std::vector<float> rank[2], contrib[2], delta;
  std::vector<PagerankState> states;  // after every step
};

template <typename T>
T* upload(Backend& b, Arena& arena, Stream& s, const std::vector<T>& host) {
  T* p = arena.allocate_n<T>(std::max<std::size_t>(host.size(), 1), "buffer");
  b.copy(p, host.data(), host.size() * sizeof(T), s);
  return p;
}
template <typename T>
std::vector<T> download(Backend& b, Stream& s, const T* device, std::size_t n) {
  std::vector<T> host(n);
  b.copy(host.data(), device, n * sizeof(T), s);
  s.synchronize();
  return host;
}

// Runs `slices` of every iteration (rank buffers swapped at each iteration's end) `iterations`
// times on `b`, reading the state back after every step.
Result run(Backend& b, const Csr& g, const std::vector<Slices>& iterations, std::int64_t max_iterations) {
  const auto n = static_cast<std::uint32_t>(g.out_degree.size());
  auto stream = b.create_stream(StreamPriority::Low);
  auto arena = b.create_arena("pagerank test", std::size_t{64} << 20, MemoryKind::Device);
  std::vector<float> r0(n, 1.0f / static_cast<float>(n)), c0(n);
  double dangling = 0;
  for (std::uint32_t v = 0; v < n; ++v) {
    c0[v] = g.out_degree[v] == 0 ? 0.0f : r0[v] / static_cast<float>(g.out_degree[v]);
    if (g.out_degree[v] == 0) dangling += r0[v];
  }
  PagerankState initial;
  initial.base = static_cast<float>((1.0 - 0.85) / n + 0.85 * dangling / n);
  const std::uint64_t* offsets = upload(b, *arena, *stream, g.offsets);
  const std::uint32_t* sources = upload(b, *arena, *stream, g.sources);
  const std::uint32_t* degree = upload(b, *arena, *stream, g.out_degree);
  float* rank[2] = {upload(b, *arena, *stream, r0), upload(b, *arena, *stream, std::vector<float>(n, -1.0f))};
  float* contrib[2] = {upload(b, *arena, *stream, c0), upload(b, *arena, *stream, std::vector<float>(n, -1.0f))};
  float* delta = upload(b, *arena, *stream, std::vector<float>(n, -1.0f));
  PagerankState* state = upload(b, *arena, *stream, std::vector<PagerankState>{initial});
  Result out;
  int in = 0;
  for (const Slices& slices : iterations) {
    for (const auto& [v0, v1] : slices) {
      b.pagerank_step(PagerankStep{offsets, sources, degree, n, rank[in], contrib[in], rank[1 - in], contrib[1 - in],
                                   delta, state, 0.85f, 1e-30, max_iterations, v0, v1},
                      *stream);
      out.states.push_back(download(b, *stream, state, 1)[0]);
    }
    in = 1 - in;
  }
  for (int k = 0; k < 2; ++k) {
    out.rank[k] = download(b, *stream, rank[k], n);
    out.contrib[k] = download(b, *stream, contrib[k], n);
  }
  out.delta = download(b, *stream, delta, n);
  return out;
}

bool same_bits(const void* a, const void* b, std::size_t bytes) { return std::memcmp(a, b, bytes) == 0; }

void expect_same(const Result& got, const Result& want) {
  for (int k = 0; k < 2; ++k) {
    EXPECT_TRUE(same_bits(got.rank[k].data(), want.rank[k].data(), want.rank[k].size() * sizeof(float))) << "rank " << k;
    EXPECT_TRUE(same_bits(got.contrib[k].data(), want.contrib[k].data(), want.contrib[k].size() * sizeof(float)))
        << "contrib " << k;
  }
  EXPECT_TRUE(same_bits(got.delta.data(), want.delta.data(), want.delta.size() * sizeof(float))) << "delta";
  ASSERT_EQ(got.states.size(), want.states.size());
  for (std::size_t i = 0; i < want.states.size(); ++i) {
    const PagerankState &a = got.states[i], &b = want.states[i];
    EXPECT_TRUE(same_bits(&a.residual_sum, &b.residual_sum, 8) && same_bits(&a.dangling_sum, &b.dangling_sum, 8) &&
                same_bits(&a.residual, &b.residual, 8) && same_bits(&a.base, &b.base, 4) && a.edges == b.edges &&
                a.iterations == b.iterations && a.done == b.done)
        << "state after step " << i << ": residual " << a.residual << " vs " << b.residual << ", base " << a.base
        << " vs " << b.base;
  }
}

class PagerankOp : public ::testing::Test {
 protected:
  void SetUp() override { cuda_emu::set_stream_mode(cuda_emu::StreamMode::Deferred); }
  std::unique_ptr<Backend> cpu_ = make_cpu_backend(2);
  std::unique_ptr<Backend> cuda_ = cuda_emu::make_emulated_cuda_backend();
};

TEST_F(PagerankOp, CpuAndEmulatedCudaAgreeBitForBit) {
  for (const std::uint32_t n : {1u, 37u, 1003u, 4099u}) {
    SCOPED_TRACE("vertices " + std::to_string(n));
    const Csr g = random_csr(n, n + 11);
    ASSERT_TRUE(cpu_->supports(OpKind::PagerankStep, DType::F32));
    ASSERT_TRUE(cuda_->supports(OpKind::PagerankStep, DType::F32));
    // Three iterations sliced three ways: odd ends, an empty slice, one vertex, the whole range.
    std::vector<Slices> iterations = {{{0, n}}, {{0, n}}, {{0, n}}};
    if (n > 10) iterations = {{{0, 3}, {3, 3}, {3, n - 5}, {n - 5, n}}, {{0, 1}, {1, n / 2 + 1}, {n / 2 + 1, n}}, {{0, n}}};
    const Result want = run(*cpu_, g, iterations, 100);
    const Result got = run(*cuda_, g, iterations, 100);
    expect_same(got, want);
    if (n == 1) {  // the rank stays 1 up to a rounding: a residual of 0 < tolerance ends it early
      EXPECT_EQ(want.states.back().done, 1u);
      EXPECT_EQ(want.states.back().residual, 0.0);
      EXPECT_LT(want.states.back().iterations, 3);
      continue;
    }
    EXPECT_EQ(want.states.back().iterations, 3);
    EXPECT_EQ(want.states.back().edges, 3 * g.sources.size());
    EXPECT_GT(want.states.back().residual, 0.0);
    // The ranks sum to 1 up to fp32 rounding: the dangling mass was spread, not lost.
    double sum = 0;
    for (float r : want.rank[1]) sum += r;  // iteration 3's output
    EXPECT_NEAR(sum, 1.0, 1e-4);
  }
}

TEST_F(PagerankOp, StepsAfterMaxIterationsChangeNothingOnBothBackends) {
  const std::uint32_t n = 1003;
  const Csr g = random_csr(n, 3);
  const std::vector<Slices> iterations = {{{0, 500}, {500, n}}, {{0, 500}, {500, n}}, {{0, 700}, {700, n}}};
  const Result want = run(*cpu_, g, iterations, 2), got = run(*cuda_, g, iterations, 2);
  expect_same(got, want);
  ASSERT_EQ(want.states.size(), 6u);
  EXPECT_EQ(want.states[3].done, 1u);
  EXPECT_EQ(want.states[3].iterations, 2);
  for (std::size_t i = 4; i < 6; ++i)
    EXPECT_TRUE(same_bits(&want.states[i], &want.states[3], sizeof(PagerankState))) << "step " << i;
  // Iteration 3 (into buffer 1) never ran: buffer 1 holds iteration 1's output, untouched since.
  EXPECT_EQ(want.states[1].iterations, 1);
}

}  // namespace
}  // namespace pipelane::cuda_test
