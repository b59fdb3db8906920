// What a lane's kernels cost training's next kernel on the same device: the simulator's interference
// parameter (parallel/sim/lane_sim.h: a lane block, once on an SM, runs to its end, so at a gap's
// end training's next kernel waits for the lane's resident blocks, and shares memory bandwidth with
// them meanwhile), measured instead of assumed. A lane thread keeps the device busy with one kind of
// lane kernel on a least-priority stream, as the gap scheduler's device steps do; training's thread
// launches a probe kernel on the greatest-priority stream at random moments and times it with
// events recorded around it on its own stream: from the moment the stream reached the probe to its
// end, so the wait for SMs the lane's blocks hold is inside. The same probes with no lane running
// give the baseline; the difference of the medians is the delay a gap's end costs training.
//
// Lane kinds: "gemm" (an fp32 N^3 GEMM: compute-bound, long blocks; a CNN's convolutions) and
// "stream" (an element-wise add over a large buffer: memory-bound, short blocks; the graph lanes,
// the image job). Probe kinds: the same two, smaller (a training GEMM, a training element-wise op),
// so the memory-bandwidth share shows on the memory-bound probe.
//
// Runs on any Backend: on a GPU (gpu_check_tool lane-block) the figures mean something; on the
// emulated backend (tests) only the procedure and the report's shape are checked.
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/backend.h"

namespace pipelane::cuda_test {

struct LaneBlockSizes {
  int lane_gemm_n = 4096;                         // the lane's GEMM: N^3
  std::size_t lane_stream_floats = 64u << 20;     // the lane's add: 3 x 256 MiB touched per kernel
  int probe_gemm_n = 1024;                        // training's probe GEMM
  std::size_t probe_stream_floats = 16u << 20;    // training's probe add
  int samples = 100;                              // probes per (lane kind, probe kind)
  int max_gap_us = 2000;                          // random wait before each probe: [0, max_gap_us)
};

struct LaneBlockSeries {
  std::string lane_kind, probe_kind;   // lane_kind "none": the baseline
  std::vector<double> probe_ms;        // each probe's time, ascending
  long lane_kernels = 0;               // lane kernels completed meanwhile

  double median_ms() const { return probe_ms.empty() ? 0.0 : probe_ms[probe_ms.size() / 2]; }
  double p90_ms() const { return probe_ms.empty() ? 0.0 : probe_ms[probe_ms.size() * 9 / 10]; }
};

namespace lane_block_detail {

struct Buffers {
  float *a, *b, *c;
};

inline Buffers gemm_buffers(Arena& arena, int n) {
  const std::size_t nn = static_cast<std::size_t>(n) * n;
  return {arena.allocate_n<float>(nn), arena.allocate_n<float>(nn), arena.allocate_n<float>(nn)};
}

inline Buffers stream_buffers(Arena& arena, std::size_t n) {
  return {arena.allocate_n<float>(n), arena.allocate_n<float>(n), arena.allocate_n<float>(n)};
}

inline void launch(Backend& backend, const std::string& kind, const Buffers& buf, int gemm_n, std::size_t stream_n,
                   Stream& stream) {
  if (kind == "gemm") backend.matmul_forward(buf.c, buf.a, buf.b, nullptr, gemm_n, gemm_n, gemm_n, stream);
  else backend.add(buf.c, buf.a, buf.b, stream_n, stream);
}

}  // namespace lane_block_detail

// One series: `lane_kind` ("none", "gemm" or "stream") running while `probe_kind` probes are timed.
inline LaneBlockSeries measure_lane_block(Backend& backend, const std::string& lane_kind, const std::string& probe_kind,
                                          const LaneBlockSizes& sizes, unsigned seed) {
  using namespace lane_block_detail;
  const std::size_t gemm_bytes = 3 * static_cast<std::size_t>(sizes.lane_gemm_n) * sizes.lane_gemm_n * sizeof(float);
  const std::size_t lane_bytes = (lane_kind == "gemm" ? gemm_bytes : 3 * sizes.lane_stream_floats * sizeof(float)) + (4u << 20);
  const std::size_t probe_bytes =
      std::max(3 * static_cast<std::size_t>(sizes.probe_gemm_n) * sizes.probe_gemm_n, 3 * sizes.probe_stream_floats) *
          sizeof(float) + (4u << 20);
  auto probe_arena = backend.create_arena("probe", probe_bytes);
  const Buffers probe = probe_kind == "gemm" ? gemm_buffers(*probe_arena, sizes.probe_gemm_n)
                                             : stream_buffers(*probe_arena, sizes.probe_stream_floats);
  auto training = backend.create_stream(StreamPriority::High);
  auto before = backend.create_event(), after = backend.create_event();

  LaneBlockSeries out{lane_kind, probe_kind, {}, 0};
  std::atomic<bool> stop{false};
  std::atomic<long> lane_kernels{0};
  std::thread lane;
  if (lane_kind != "none")
    lane = std::thread([&] {
      auto stream = backend.create_stream(StreamPriority::Low);
      auto arena = backend.create_arena("lane", lane_bytes, MemoryKind::DevicePool);
      const Buffers buf = lane_kind == "gemm" ? gemm_buffers(*arena, sizes.lane_gemm_n)
                                              : stream_buffers(*arena, sizes.lane_stream_floats);
      auto done = backend.create_event();
      // Two kernels in flight: the device never drains between them, as a lane with queued steps.
      launch(backend, lane_kind, buf, sizes.lane_gemm_n, sizes.lane_stream_floats, *stream);
      while (!stop.load()) {
        launch(backend, lane_kind, buf, sizes.lane_gemm_n, sizes.lane_stream_floats, *stream);
        done->record(*stream);
        done->synchronize();
        lane_kernels.fetch_add(1);
      }
      stream->synchronize();
    });
  // Probes start once a lane kernel has completed: the lane is running, not being set up.
  while (lane_kind != "none" && lane_kernels.load() < 1) std::this_thread::yield();

  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> gap_us(0, std::max(0, sizes.max_gap_us - 1));
  // One probe first, untimed: the first launch of a kernel pays for loading it.
  launch(backend, probe_kind, probe, sizes.probe_gemm_n, sizes.probe_stream_floats, *training);
  training->synchronize();
  for (int i = 0; i < sizes.samples; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(gap_us(rng)));
    before->record(*training);
    launch(backend, probe_kind, probe, sizes.probe_gemm_n, sizes.probe_stream_floats, *training);
    after->record(*training);
    after->synchronize();
    out.probe_ms.push_back(after->elapsed_ms_since(*before));
  }
  stop.store(true);
  if (lane.joinable()) lane.join();
  out.lane_kernels = lane_kernels.load();
  std::sort(out.probe_ms.begin(), out.probe_ms.end());
  return out;
}

}  // namespace pipelane::cuda_test
