// The GPU check's lane_block measurement (lane_block_probe.h) run on the emulated CUDA backend at
// tiny sizes: the procedure (a lane thread keeping a least-priority stream busy, timed probes on a
// greatest-priority one) completes for every lane and probe kind, gives one time per probe in
// order, and the lane really ran while the probes were timed. What the times are is for a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "runtime/cuda/emu/emulated_backend.h"
#include "tests/cuda/lane_block_probe.h"

namespace pipelane::cuda_test {
namespace {

TEST(LaneBlockProbe, EveryLaneAndProbeKindRunsOnTheEmulatedBackend) {
  const auto backend = cuda_emu::make_emulated_cuda_backend();
  LaneBlockSizes sizes;
  sizes.lane_gemm_n = 16;
  sizes.lane_stream_floats = 4096;
  sizes.probe_gemm_n = 8;
  sizes.probe_stream_floats = 512;
  sizes.samples = 5;
  sizes.max_gap_us = 200;
  unsigned seed = 1;
  for (const std::string probe : {"gemm", "stream"})
    for (const std::string lane : {"none", "gemm", "stream"}) {
      const LaneBlockSeries s = measure_lane_block(*backend, lane, probe, sizes, seed++);
      EXPECT_EQ(s.lane_kind, lane);
      EXPECT_EQ(s.probe_kind, probe);
      ASSERT_EQ(s.probe_ms.size(), 5u) << lane << " / " << probe;
      EXPECT_TRUE(std::is_sorted(s.probe_ms.begin(), s.probe_ms.end()));
      EXPECT_GE(s.probe_ms.front(), 0.0);
      EXPECT_LE(s.median_ms(), s.p90_ms());
      if (lane == "none") EXPECT_EQ(s.lane_kernels, 0);
      else EXPECT_GE(s.lane_kernels, 1) << "the lane did not run while " << probe << " probes were timed";
    }
}

}  // namespace
}  // namespace pipelane::cuda_test
