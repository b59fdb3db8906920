// Backend::bfs_step and Backend::graphsgd_step on the emulated CUDA backend (deferred streams)
// against the CPU backend and a straightforward reference, on tiny R-MAT graphs.
// BFS: every pass's state, the depth buffers, the traversal records and level sizes bit for bit
// (integers: any thread order gives them), for several slicings; the depths against a serial queue
// BFS for each traversal; a step after done changes nothing.
// SGD: the CPU op is the lane's serial loop; the device kernel sums each dot product as a warp
// butterfly, so its bits differ. Both are checked against one iteration in double, within a bound
// derived alongside it (below), and against each other within twice that bound; two device runs
// are bit-identical, and slice boundaries (mid-row) do not change a bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <iostream>
#include <random>
#include <utility>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cuda/emu/emulated_backend.h"
#include "runtime/cuda/emu/fake_cuda_runtime.h"
#include "tests/cuda/graph_reference.h"

namespace pipelane::cuda_test {
namespace {

using namespace graph_reference;

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
bool same_bits(const void* a, const void* b, std::size_t bytes) { return std::memcmp(a, b, bytes) == 0; }

class GraphOps : public ::testing::Test {
 protected:
  void SetUp() override { cuda_emu::set_stream_mode(cuda_emu::StreamMode::Deferred); }
  std::unique_ptr<Backend> cpu_ = make_cpu_backend(2);
  std::unique_ptr<Backend> cuda_ = cuda_emu::make_emulated_cuda_backend();
};

// ---- BFS ----

struct BfsRun {
  std::vector<BfsState> states;  // after every pass
  std::vector<std::int32_t> depth[2];
  std::vector<BfsTraversalRecord> records;
  std::vector<std::uint64_t> level_sizes;
};

// Passes of `slices` (vertex ends) until done, then two passes more (no-ops).
BfsRun run_bfs(Backend& b, const Rows& in_edges, const std::vector<std::uint32_t>& slice_ends,
               std::uint64_t first_source, std::int64_t traversals) {
  const std::uint32_t n = in_edges.n;
  auto stream = b.create_stream(StreamPriority::Low);
  auto arena = b.create_arena("bfs test", std::size_t{16} << 20, MemoryKind::Device);
  const auto cap = static_cast<std::uint32_t>(traversals);
  const std::uint64_t* off = upload(b, *arena, *stream, in_edges.offsets);
  const std::uint32_t* src = upload(b, *arena, *stream, in_edges.others);
  std::int32_t* depth[2] = {upload(b, *arena, *stream, std::vector<std::int32_t>(n, -9)),
                            upload(b, *arena, *stream, std::vector<std::int32_t>(n, -9))};
  BfsState initial;
  initial.source = first_source;
  BfsState* state = upload(b, *arena, *stream, std::vector<BfsState>{initial});
  auto* records = upload(b, *arena, *stream, std::vector<BfsTraversalRecord>(cap, BfsTraversalRecord{0, 0, 0, 0}));
  auto* levels = upload(b, *arena, *stream, std::vector<std::uint64_t>(std::size_t{cap} * kBfsRecordedLevels, 0));
  BfsRun out;
  int extra = 0;
  for (std::uint64_t pass = 0; extra < 2 && pass < traversals * (n + 1ull) + 2; ++pass) {
    const int in = static_cast<int>(pass % 2);
    std::uint32_t begin = 0;
    for (const std::uint32_t end : slice_ends) {
      b.bfs_step(BfsStep{off, src, n, depth[in], depth[1 - in], state, records, levels, cap, first_source, traversals,
                         begin, end},
                 *stream);
      begin = end;
    }
    out.states.push_back(download(b, *stream, state, 1)[0]);
    extra += out.states.back().done != 0;
  }
  for (int k = 0; k < 2; ++k) out.depth[k] = download(b, *stream, depth[k], n);
  out.records = download(b, *stream, records, cap);
  out.level_sizes = download(b, *stream, levels, std::size_t{cap} * kBfsRecordedLevels);
  return out;
}

TEST_F(GraphOps, BfsPassesAgreeBitForBitAndGiveTheSerialBfsDepths) {
  for (const bool undirected : {false, true}) {
    const Rows g = rmat_rows(6, 4, 3, /*by_source=*/false, undirected);
    const std::uint32_t n = g.n;
    ASSERT_TRUE(cuda_->supports(OpKind::BfsStep, DType::F32));
    // Whole passes; odd slices with a one-vertex slice and one past the hub (vertex 0).
    for (const std::vector<std::uint32_t>& ends : {std::vector<std::uint32_t>{n}, {1, 2, 29, 30, n - 3, n}}) {
      SCOPED_TRACE(::testing::Message() << (undirected ? "undirected" : "directed") << ", " << ends.size() << " slices");
      const std::int64_t traversals = 3;
      const std::uint64_t first = n - 2;  // sources n - 2, n - 1, 0 (wrapping)
      const BfsRun want = run_bfs(*cpu_, g, ends, first, traversals);
      const BfsRun got = run_bfs(*cuda_, g, ends, first, traversals);
      ASSERT_EQ(got.states.size(), want.states.size());
      for (std::size_t i = 0; i < want.states.size(); ++i)
        EXPECT_TRUE(same_bits(&got.states[i], &want.states[i], sizeof(BfsState))) << "state after pass " << i;
      for (int k = 0; k < 2; ++k)
        EXPECT_TRUE(same_bits(got.depth[k].data(), want.depth[k].data(), n * sizeof(std::int32_t))) << "depth " << k;
      EXPECT_TRUE(same_bits(got.records.data(), want.records.data(), got.records.size() * sizeof(BfsTraversalRecord)));
      EXPECT_EQ(got.level_sizes, want.level_sizes);
      // Done, and the two passes after it changed nothing.
      const BfsState& last = want.states.back();
      ASSERT_EQ(last.done, 1u);
      EXPECT_EQ(last.traversal, traversals);
      static_assert(sizeof(BfsState) == 64, "no padding: states compare as bytes");
      EXPECT_TRUE(same_bits(&want.states[want.states.size() - 2], &last, sizeof(BfsState)));
      // Every traversal against the serial BFS: reached vertices, levels, level sizes; the last
      // one's depths are in buffer passes % 2.
      for (std::int64_t t = 0; t < traversals; ++t) {
        const auto source = static_cast<std::uint32_t>((first + t) % n);
        const std::vector<std::int32_t> d = reference_depths(g, source);
        std::vector<std::uint64_t> sizes;
        for (const std::int32_t x : d) {
          if (x < 0) continue;
          if (sizes.size() <= static_cast<std::size_t>(x)) sizes.resize(x + 1, 0);
          ++sizes[x];
        }
        std::uint64_t reached = 0;
        for (const std::uint64_t s : sizes) reached += s;
        const BfsTraversalRecord& r = want.records[t];
        EXPECT_EQ(r.source, source);
        EXPECT_EQ(r.reached, reached) << "traversal " << t;
        EXPECT_EQ(r.levels, sizes.size()) << "traversal " << t;
        const std::uint64_t* got_sizes = want.level_sizes.data() + t * kBfsRecordedLevels;
        EXPECT_EQ(std::vector<std::uint64_t>(got_sizes, got_sizes + sizes.size()), sizes) << "traversal " << t;
        if (t == traversals - 1) {
          EXPECT_EQ(want.depth[last.passes % 2], d);
        }
      }
      EXPECT_GT(want.records[0].reached, 1u) << "a traversal that reaches nothing tests little";
    }
  }
}

// ---- graph SGD ----

struct SgdRun {
  std::vector<float> user, item;
  GraphSgdState state;
};

// Field by field: the struct has tail padding, which a copy need not keep.
bool same_state(const GraphSgdState& a, const GraphSgdState& b) {
  return same_bits(&a.squared_error, &b.squared_error, sizeof(double)) && same_bits(&a.rmse, &b.rmse, sizeof(double)) &&
         a.edges == b.edges && a.iterations == b.iterations && a.done == b.done;
}

// One iteration (update pass, RMSE pass), each pass cut at `cuts` (edge positions).
SgdRun run_sgd(Backend& b, const SgdData& d, const std::vector<std::uint64_t>& cuts) {
  auto stream = b.create_stream(StreamPriority::Low);
  auto arena = b.create_arena("sgd test", std::size_t{16} << 20, MemoryKind::Device);
  const auto m = static_cast<std::uint64_t>(d.g.others.size());
  const std::uint64_t* off = upload(b, *arena, *stream, d.g.offsets);
  const std::uint32_t* items = upload(b, *arena, *stream, d.g.others);
  const float* ratings = upload(b, *arena, *stream, d.ratings);
  float* user = upload(b, *arena, *stream, d.user);
  float* item = upload(b, *arena, *stream, d.item);
  GraphSgdState* state = upload(b, *arena, *stream, std::vector<GraphSgdState>(1));
  double* history = upload(b, *arena, *stream, std::vector<double>(1, 0.0));
  for (std::uint32_t pass = 0; pass < 2; ++pass) {
    std::uint64_t begin = 0;
    std::vector<std::uint64_t> ends = cuts;
    ends.push_back(m);
    for (const std::uint64_t end : ends) {
      // The row of `begin`: the last row starting at or before it (rows without edges skipped).
      std::uint32_t row = 0;
      while (d.g.offsets[row + 1] <= begin && row + 1 < d.g.n) ++row;
      b.graphsgd_step(GraphSgdStep{off, items, ratings, d.g.n, m, user, item, d.K, kRate, kLambda, state, history, 1,
                                   0.0, 5, pass, row, begin, end},
                      *stream);
      begin = end;
    }
  }
  const std::size_t floats = std::size_t{d.g.n} * d.K;
  return SgdRun{download(b, *stream, user, floats), download(b, *stream, item, floats),
                download(b, *stream, state, 1)[0]};
}

TEST_F(GraphOps, SgdIterationWithinTheDerivedBoundOfDoubleOnBothBackends) {
  for (const int K : {8, 40}) {  // 40: lanes holding two dimensions, eight lanes one
    SCOPED_TRACE("K = " + std::to_string(K));
    const SgdData d = sgd_data(K, 7);
    const auto m = static_cast<std::uint64_t>(d.g.others.size());
    ASSERT_GT(m, 100u);
    ASSERT_TRUE(cuda_->supports(OpKind::GraphSgdStep, DType::F32));
    const std::vector<std::uint64_t> whole = {}, cut = {1, 7, m / 2 + 1, m - 1};  // cuts inside rows
    const SgdRun cpu = run_sgd(*cpu_, d, whole), cpu_cut = run_sgd(*cpu_, d, cut);
    const SgdRun gpu = run_sgd(*cuda_, d, cut), gpu_again = run_sgd(*cuda_, d, whole);
    // Slices change nothing (serial); the device is deterministic.
    EXPECT_EQ(cpu.user, cpu_cut.user);
    EXPECT_EQ(cpu.item, cpu_cut.item);
    EXPECT_TRUE(same_state(cpu.state, cpu_cut.state));
    EXPECT_TRUE(same_bits(gpu.user.data(), gpu_again.user.data(), gpu.user.size() * sizeof(float)));
    EXPECT_TRUE(same_bits(gpu.item.data(), gpu_again.item.data(), gpu.item.size() * sizeof(float)));
    EXPECT_TRUE(same_state(gpu.state, gpu_again.state));

    const SgdReference ref = reference_sgd(d);
    double worst = 0, largest_bound = 0;
    const auto check = [&](const std::vector<float>& cpu_v, const std::vector<float>& gpu_v,
                           const std::vector<double>& want, const std::vector<double>& bound, const char* what) {
      for (std::size_t i = 0; i < want.size(); ++i) {
        const double b = bound[i] + std::ldexp(std::fabs(want[i]), -40);
        ASSERT_LE(std::fabs(cpu_v[i] - want[i]), b) << what << "[" << i << "] cpu";
        ASSERT_LE(std::fabs(gpu_v[i] - want[i]), b) << what << "[" << i << "] device";
        ASSERT_LE(std::fabs(gpu_v[i] - cpu_v[i]), 2 * b) << what << "[" << i << "] device vs cpu";
        worst = std::max(worst, std::fabs(gpu_v[i] - cpu_v[i]) / (2 * b));
        largest_bound = std::max(largest_bound, bound[i] / std::max(std::fabs(want[i]), 1e-3));
      }
    };
    check(cpu.user, gpu.user, ref.user, ref.user_bound, "user");
    check(cpu.item, gpu.item, ref.item, ref.item_bound, "item");
    // The bound must say something: a wrong or missing update moves a value by ~ step * |err| * |q|
    // (~1e-2 relative here); the bound stays below a tenth of that.
    EXPECT_LT(largest_bound, 1e-3);
    std::cout << "[   NOTE   ] K " << K << ": device vs cpu at most " << worst << " of the derived bound\n";
    const double rmse = std::sqrt(ref.squared_error / m);
    const double rmse_bound = (ref.squared_error_bound + std::ldexp(ref.squared_error, -40)) / (m * rmse);
    for (const SgdRun* run : {&cpu, &gpu}) {
      EXPECT_EQ(run->state.iterations, 1);
      EXPECT_EQ(run->state.edges, 2 * m);
      EXPECT_EQ(run->state.rmse, std::sqrt(run->state.squared_error / m));  // kept until the next update pass
      EXPECT_NEAR(run->state.rmse, rmse, rmse_bound);
    }
  }
}

}  // namespace
}  // namespace pipelane::cuda_test
