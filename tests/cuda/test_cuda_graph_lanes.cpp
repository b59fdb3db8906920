// The bfs and graphsgd lanes on the emulated device (pool arena, deferred stream): their steps are
// Backend::bfs_step / graphsgd_step on the lane stream, the graph in the pool arena.
// bfs: the same traversals (reached vertices, levels, level sizes) and the same depths file as the
// host push step on the CPU backend; saved mid-pass (depth buffers copied back) and resumed in a
// fresh instance, the same report. graphsgd: RMSEs within the rounding of the device's dot
// products of the CPU's (below); two device runs and a run resumed mid-pass bit-identical; a state
// the CPU saved mid-pass resumes on the device.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "lanes/builtin/bfs_lane.h"
#include "lanes/builtin/graphsgd_lane.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cuda/emu/emulated_backend.h"
#include "runtime/cuda/emu/fake_cuda_runtime.h"
#include "tests/datasets/test_files.h"

namespace pipelane::cuda_test {
namespace {

using test_support::TempDir;

constexpr std::size_t kQuota = std::size_t{4} << 20;

struct LaneInstance {
  TempDir dir;
  LaneOptions options;
  std::unique_ptr<Stream> stream;
  std::unique_ptr<Arena> arena;
  std::unique_ptr<LaneContext> ctx;
  std::unique_ptr<Lane> lane;
  LaneInstance(Backend& b, std::unique_ptr<Lane> l, const std::string& name,
               const std::map<std::string, std::string>& values, MemoryKind kind)
      : options(name, values, "test"), stream(b.create_stream(StreamPriority::Low)),
        arena(b.create_arena("lane", kQuota, kind)),
        ctx(new LaneContext{b, *stream, *arena, options, dir.path().string(), 0, 7}), lane(std::move(l)) {
    lane->setup(*ctx);
  }
  ~LaneInstance() { stream->synchronize(); }
  // Returns the steps that enqueued work (a device run's steps return 0 while it waits for its
  // state to come back, or once everything is enqueued).
  int run_to_end() {
    int working = 0;
    for (int steps = 0; !lane->finished() && steps < 100000; ++steps) {
      if (lane->step(*ctx) > 0) ++working;
      else std::this_thread::sleep_for(std::chrono::microseconds(100));  // the deferred stream catches up
    }
    lane->teardown(*ctx);
    return working;
  }
  std::string file(const std::string& name) const {
    std::ifstream in(dir.file(name));
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
};

class GraphLanesOnTheDevice : public ::testing::Test {
 protected:
  void SetUp() override { cuda_emu::set_stream_mode(cuda_emu::StreamMode::Deferred); }
  std::unique_ptr<Backend> cuda_ = cuda_emu::make_emulated_cuda_backend();
  std::unique_ptr<Backend> cpu_ = make_cpu_backend(1);
};

TEST_F(GraphLanesOnTheDevice, BfsPullOnTheDeviceGivesTheHostPushTraversalsAndResumes) {
  const std::map<std::string, std::string> values = {{"generate", "rmat"}, {"scale", "7"}, {"edge_factor", "4"},
                                                     {"undirected", "true"}, {"traversals", "2"}, {"source", "1"},
                                                     {"slice_edges", "300"}, {"write_depths", "true"}};
  LaneInstance device(*cuda_, make_bfs_lane(), "bfs", values, MemoryKind::DevicePool);
  LaneInstance host(*cpu_, make_bfs_lane(), "bfs", values, MemoryKind::Device);
  EXPECT_TRUE(device.lane->runs_on_device());
  const int steps = device.run_to_end();
  host.run_to_end();
  const nlohmann::json got = device.lane->report(), want = host.lane->report();
  EXPECT_NE(got.at("step").get<std::string>().find("Backend::bfs_step on cuda"), std::string::npos) << got.at("step");
  ASSERT_EQ(got.at("traversals").size(), 2u);
  for (int t = 0; t < 2; ++t)
    for (const char* key : {"source", "reached", "levels", "level_sizes"})
      EXPECT_EQ(got["traversals"][t][key], want["traversals"][t][key]) << "traversal " << t << " " << key;
  EXPECT_GT(want["traversals"][0]["reached"].get<int>(), 10);
  EXPECT_EQ(device.file("depths.txt"), host.file("depths.txt"));
  EXPECT_FALSE(host.file("depths.txt").empty());
  EXPECT_GT(steps, 6);

  LaneInstance first(*cuda_, make_bfs_lane(), "bfs", values, MemoryKind::DevicePool);
  for (int i = 0; i < steps / 2 + 1; ++i) first.lane->step(*first.ctx);
  ASSERT_FALSE(first.lane->finished());
  const std::string state = first.lane->save();
  LaneInstance resumed(*cuda_, make_bfs_lane(), "bfs", values, MemoryKind::DevicePool);
  resumed.lane->load(state);
  resumed.run_to_end();
  EXPECT_EQ(resumed.lane->report(), got);
  EXPECT_EQ(resumed.file("depths.txt"), device.file("depths.txt"));
}

// The device's dot products are a butterfly over the warp, the CPU's a sequential sum: each dot
// differs by at most ~K = 16 roundings (2^-24 relative each, ~1e-6), and the SGD damps such
// differences rather than grows them over a few iterations (step * |q|^2 << 1; the bound of one
// iteration is derived in test_cuda_graph_ops.cpp), so 1e-4 relative on the RMSE (the lane tests'
// tolerance against a reference, for the same reason) is ample, and far below what one edge out of
// order changes (tests/lanes/test_graphsgd_lane.cpp).
constexpr double kRmseRelTolerance = 1e-4;

TEST_F(GraphLanesOnTheDevice, GraphSgdOnTheDeviceIsDeterministicResumesAndTracksTheCpu) {
  std::map<std::string, std::string> values = {{"generate", "rmat"}, {"scale", "6"}, {"edge_factor", "4"},
                                               {"slice_edges", "90"}, {"iterations", "2"}};
  LaneInstance device(*cuda_, make_graphsgd_lane(), "graphsgd", values, MemoryKind::DevicePool);
  LaneInstance again(*cuda_, make_graphsgd_lane(), "graphsgd", values, MemoryKind::DevicePool);
  LaneInstance host(*cpu_, make_graphsgd_lane(), "graphsgd", values, MemoryKind::Device);
  const int steps = device.run_to_end();
  again.run_to_end();
  host.run_to_end();
  const nlohmann::json got = device.lane->report(), want = host.lane->report();
  EXPECT_NE(got.at("step").get<std::string>().find("Backend::graphsgd_step on cuda"), std::string::npos);
  EXPECT_EQ(device.lane->save(), again.lane->save()) << "two device runs differ";
  EXPECT_EQ(got.at("iterations"), 2);
  EXPECT_EQ(got.at("edges_visited"), want.at("edges_visited"));
  ASSERT_EQ(got.at("rmse").size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const double g = got["rmse"][i], w = want["rmse"][i];
    EXPECT_NEAR(g, w, kRmseRelTolerance * w) << "iteration " << i;
  }
  EXPECT_GT(steps, 10);

  for (const bool from_cpu : {false, true}) {  // a device state, then the CPU's, resumed on the device
    LaneInstance first(from_cpu ? *cpu_ : *cuda_, make_graphsgd_lane(), "graphsgd", values,
                       from_cpu ? MemoryKind::Device : MemoryKind::DevicePool);
    for (int i = 0; i < steps / 2 + 1; ++i) first.lane->step(*first.ctx);  // inside the second update pass
    ASSERT_FALSE(first.lane->finished());
    const std::string state = first.lane->save();
    LaneInstance resumed(*cuda_, make_graphsgd_lane(), "graphsgd", values, MemoryKind::DevicePool);
    resumed.lane->load(state);
    resumed.run_to_end();
    if (!from_cpu) {
      EXPECT_EQ(resumed.lane->save(), device.lane->save()) << "resumed device run differs";
    }
    const nlohmann::json r = resumed.lane->report();
    for (int i = 0; i < 2; ++i) {
      const double g = r["rmse"][i], w = want["rmse"][i];
      EXPECT_NEAR(g, w, kRmseRelTolerance * w) << "iteration " << i << (from_cpu ? " (from the cpu)" : "");
    }
  }
}

}  // namespace
}  // namespace pipelane::cuda_test
