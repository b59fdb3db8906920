// A tiny GPT trained through the real PipelineExecutor on the CUDA backend built for the CPU
// (kernels emulated, CUDA runtime faked, GEMMs interpreted) against the CPU backend: the same
// losses and gradient norms within 1e-5 relative, for one process (deferred streams: the
// executor's events and synchronisations are exercised for real) and for two pipeline stages as
// threads (immediate streams: the test thread planes copy buffers at call time). With a lane-like
// load on a low-priority stream of the same backend, the losses stay bit-identical.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cuda/emu/emulated_backend.h"
#include "runtime/cuda/emu/fake_cuda_runtime.h"
#include "tests/cuda/emulated_stages.h"
#include "tests/cuda/training_parity.h"

namespace pipelane::cuda_test {
namespace {

TEST(CudaEmulatedTraining, OneProcessMatchesTheCpuBackend) {
  cuda_emu::set_stream_mode(cuda_emu::StreamMode::Deferred);
  const auto cpu = make_cpu_backend(1);
  const TrainRun want = train_one_process(*cpu);
  const auto cuda = cuda_emu::make_emulated_cuda_backend();
  expect_close(train_one_process(*cuda), want);
}

// Lane-like work on a low-priority stream of the same backend, all through training: the losses
// do not change by one bit (deterministic kernels; streams share nothing but the device).
TEST(CudaEmulatedTraining, LaneWorkOnALowPriorityStreamChangesNoBit) {
  cuda_emu::set_stream_mode(cuda_emu::StreamMode::Deferred);
  const auto cuda = cuda_emu::make_emulated_cuda_backend();
  const TrainRun quiet = train_one_process(*cuda, 2);
  std::atomic<bool> stop{false};
  std::atomic<int> lane_steps{0};
  std::thread lane([&] {
    auto stream = cuda->create_stream(StreamPriority::Low);
    auto arena = cuda->create_pool_arena("lane", 1 << 20);
    const std::size_t n = 4096;
    float* x = arena->allocate_n<float>(n);
    float* y = arena->allocate_n<float>(n);
    // Bounded, so the emulator (one grid at a time) is not mostly lane work.
    while (!stop.load() && lane_steps.load() < 40) {
      cuda->gelu_forward(y, x, n, *stream);
      cuda->add_inplace(x, y, n, *stream);
      (void)cuda->sum_squares(x, n, *stream);
      lane_steps.fetch_add(1);
    }
    stream->synchronize();
  });
  const TrainRun busy = train_one_process(*cuda, 2);
  stop.store(true);
  lane.join();
  EXPECT_GT(lane_steps.load(), 0);
  ASSERT_EQ(busy.loss.size(), quiet.loss.size());
  for (std::size_t s = 0; s < quiet.loss.size(); ++s) {
    EXPECT_EQ(std::memcmp(&busy.loss[s], &quiet.loss[s], sizeof(double)), 0) << "step " << s + 1;
    EXPECT_EQ(std::memcmp(&busy.grad_norm[s], &quiet.grad_norm[s], sizeof(double)), 0) << "step " << s + 1;
  }
}

TEST(CudaEmulatedTraining, TwoPipelineStagesMatchTheCpuBackend) {
  const auto cpu = make_cpu_backend(1);
  const TrainRun want = train_one_process(*cpu);
  const ParallelDims dims{1, 1, 2};
  TrainRun got;
  const std::vector<std::string> errors = run_emulated_stages(dims, [&](int rank, Topology& topo, Backend& backend) {
    TrainRun mine = train_tiny(topo, backend, dims.pp);
    if (rank == 0) got = mine;
  });
  for (int r = 0; r < dims.world(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  expect_close(got, want);
}

// Sequence parallelism on the CUDA backend's kernels (emulated), tp 2 x pp 2: the row-split norms,
// residual adds and bias adds, the all-gathers and reduce-scatters between them, against tp alone
// on the same backend. The first step is bit-identical; after it the norms' gradients are
// reassociated sums (each rank's rows, then over tp), within the 1e-5 relative
// (tests/parallel/test_executor_sequence_parallel.cpp derives it on the CPU backend).
TEST(CudaEmulatedTraining, SequenceParallelMatchesTensorParallelAlone) {
  const ParallelDims dims{2, 1, 2};
  TrainRun runs[2];
  for (bool sp : {false, true}) {
    const std::vector<std::string> errors = run_emulated_stages(dims, [&](int rank, Topology& topo, Backend& backend) {
      TrainRun mine = train_steps(topo, backend, tiny_gpt(), dims.pp, 2, 8, 2, 3, nullptr, sp);
      if (rank == 0) runs[sp] = mine;
    });
    for (int r = 0; r < dims.world(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r << " sp " << sp;
  }
  ASSERT_EQ(runs[1].loss.size(), 3u);
  EXPECT_EQ(runs[1].loss[0], runs[0].loss[0]);
  for (std::size_t s = 0; s < runs[0].loss.size(); ++s) {
    EXPECT_LE(std::fabs(runs[1].loss[s] - runs[0].loss[s]), 1e-5 * std::fabs(runs[0].loss[s])) << "step " << s + 1;
    EXPECT_LE(std::fabs(runs[1].grad_norm[s] - runs[0].grad_norm[s]), 1e-5 * runs[0].grad_norm[s]) << "step " << s + 1;
  }
}

// Sharded masters on the CUDA backend's kernels (emulated), dp 2: bf16 GEMM weights under the
// distributed optimizer, where each bucket of GEMM weights is rounded by its owner and gathered in
// bf16 into the copy and each bucket of norms and biases gathered in fp32 into the packed copy,
// against the replicated optimizer on the same backend: the same losses, bit for bit. Clipping is
// off: the norm is summed from the shards in another order, so only the loss is compared exactly.
TEST(CudaEmulatedTraining, ShardedMastersTrainAsTheReplicatedOptimizer) {
  const ParallelDims dims{1, 2, 1};
  TrainRun runs[2];
  for (bool zero : {false, true}) {
    const auto configure = [zero](ExecutorOptions& o) {
      o.distributed_optimizer = zero;
      o.grad_clip = 0.f;
      o.optimizer_bucket_floats = 1000;  // buckets of both kinds in this small model
    };
    const std::vector<std::string> errors = run_emulated_stages(
        dims,
        [&](int rank, Topology& topo, Backend& backend) {
          TrainRun mine =
              train_steps(topo, backend, tiny_gpt(), 1, 2, 8, 2, 3, nullptr, false, DType::F32, DType::BF16, configure);
          if (rank == 0) runs[zero] = mine;
        },
        DType::BF16);
    for (int r = 0; r < dims.world(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r << " zero " << zero;
  }
  ASSERT_EQ(runs[1].loss.size(), 3u);
  EXPECT_EQ(runs[1].loss, runs[0].loss);
  EXPECT_NE(runs[0].loss.front(), runs[0].loss.back()) << "it does not train";
  // The same squares summed in two orders, each within gamma_K = K u / (1 - K u) of the exact sum:
  // K < 1.2 x 10^5 here ((the model's ~28k parameters, twice, and 2 ranks) times dp 2), u = 2^-53,
  // so under 1.4e-11 each, and the square roots add u.
  for (std::size_t s = 0; s < runs[0].grad_norm.size(); ++s)
    EXPECT_NEAR(runs[1].grad_norm[s], runs[0].grad_norm[s], 3e-11 * runs[0].grad_norm[s]) << "step " << s + 1;
}

}  // namespace
}  // namespace pipelane::cuda_test
