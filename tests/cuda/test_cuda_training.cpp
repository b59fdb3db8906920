// A tiny GPT trained through the real PipelineExecutor on the CUDA backend built for the CPU
// (kernels emulated, CUDA runtime faked, GEMMs interpreted) against the CPU backend: the same
// losses and gradient norms within 1e-5 relative, for one process (deferred streams: the
// executor's events and synchronisations are exercised for real) and for two pipeline stages as
// threads (immediate streams: the test thread planes copy buffers at call time). With a lane-like
// load on a low-priority stream of the same backend, the losses stay bit-identical.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "parallel/pipeline_executor.h"
#include "parallel/thread_planes.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cuda/emu/emulated_backend.h"
#include "runtime/cuda/emu/fake_cuda_runtime.h"

namespace pipelane::cuda_test {
namespace {

GptConfig tiny_model() {
  GptConfig c;
  c.layers = 2;
  c.d_model = 32;
  c.heads = 4;
  c.max_seq_len = 8;
  c.vocab_size = 61;
  return c;
}

constexpr int kMicroBatch = 2, kSeq = 8, kMicrobatches = 2, kSteps = 3;

std::vector<std::int32_t> tokens_of(int step, int mb, int shift) {
  std::vector<std::int32_t> out(kMicroBatch * kSeq);
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<std::int32_t>((step * 131 + mb * 31 + static_cast<int>(i) * 7 + shift) % 61);
  return out;
}

struct Losses {
  std::vector<double> loss, grad_norm;
};

// One rank's training; `busy` (may be null) is called between steps.
Losses train_rank(Topology& topo, Backend& backend, int pp) {
  ExecutorOptions o;
  o.model = tiny_model();
  o.schedule = {ScheduleKind::OneFOneB, pp, 1, kMicrobatches};
  o.micro_batch = kMicroBatch;
  o.seq_len = kSeq;
  o.seed = 5;
  PipelineExecutor exec(o, topo, backend);
  const float loss_scale = 1.0f / (kMicrobatches * kMicroBatch * kSeq);
  Losses out;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<std::int32_t> tok, tgt;
    for (int k = 0; k < kMicrobatches; ++k) {
      const auto t = tokens_of(step, k, 0), y = tokens_of(step, k, 1);
      tok.insert(tok.end(), t.begin(), t.end());
      tgt.insert(tgt.end(), y.begin(), y.end());
    }
    const StepStats st = exec.step(tok.data(), tgt.data(), loss_scale, 1e-2f, step + 1);
    out.loss.push_back(st.loss_sum * loss_scale);
    out.grad_norm.push_back(st.grad_norm);
  }
  return out;
}

Losses train_one_process(Backend& backend) {
  Topology topo = Topology::single_process();
  return train_rank(topo, backend, 1);
}

void expect_close(const Losses& got, const Losses& want) {
  ASSERT_EQ(got.loss.size(), want.loss.size());
  // 1e-5 relative: the same arithmetic in another order (GEMMs interpreted in double and rounded
  // once, glibc's expf against the CPU's polynomial), as the parallel-equivalence tests allow.
  for (std::size_t s = 0; s < want.loss.size(); ++s) {
    EXPECT_NEAR(got.loss[s], want.loss[s], 1e-5 * want.loss[s]) << "step " << s + 1;
    EXPECT_NEAR(got.grad_norm[s], want.grad_norm[s], 1e-5 * want.grad_norm[s]) << "step " << s + 1;
  }
  EXPECT_NE(want.loss.front(), want.loss.back()) << "the model does not train";
}

TEST(CudaEmulatedTraining, OneProcessMatchesTheCpuBackend) {
  cuda_emu::set_stream_mode(cuda_emu::StreamMode::Deferred);
  const auto cpu = make_cpu_backend(1);
  const Losses want = train_one_process(*cpu);
  const auto cuda = cuda_emu::make_emulated_cuda_backend();
  expect_close(train_one_process(*cuda), want);
}

// Lane-like work on a low-priority stream of the same backend, all through training: the losses
// do not change by one bit (deterministic kernels; streams share nothing but the device).
TEST(CudaEmulatedTraining, LaneWorkOnALowPriorityStreamChangesNoBit) {
  cuda_emu::set_stream_mode(cuda_emu::StreamMode::Deferred);
  const auto cuda = cuda_emu::make_emulated_cuda_backend();
  const Losses quiet = train_one_process(*cuda);
  std::atomic<bool> stop{false};
  std::atomic<int> lane_steps{0};
  std::thread lane([&] {
    auto stream = cuda->create_stream(StreamPriority::Low);
    auto arena = cuda->create_pool_arena("lane", 1 << 20);
    const std::size_t n = 4096;
    float* x = arena->allocate_n<float>(n);
    float* y = arena->allocate_n<float>(n);
    while (!stop.load()) {
      cuda->gelu_forward(y, x, n, *stream);
      cuda->add_inplace(x, y, n, *stream);
      (void)cuda->sum_squares(x, n, *stream);
      lane_steps.fetch_add(1);
    }
    stream->synchronize();
  });
  const Losses busy = train_one_process(*cuda);
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
  const Losses want = train_one_process(*cpu);
  cuda_emu::set_stream_mode(cuda_emu::StreamMode::Immediate);
  const ParallelDims dims{1, 1, 2};
  ThreadJob job(dims);
  Losses got;
  std::vector<std::string> errors(dims.world());
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < dims.world(); ++rank)
    ranks.emplace_back([&, rank] {
      try {
        Topology topo = job.topology(rank);
        const auto backend = cuda_emu::make_emulated_cuda_backend();
        Losses mine = train_rank(topo, *backend, dims.pp);
        if (rank == 0) got = mine;
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  for (std::thread& t : ranks) t.join();
  cuda_emu::set_stream_mode(cuda_emu::StreamMode::Deferred);
  for (int r = 0; r < dims.world(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  expect_close(got, want);
}

}  // namespace
}  // namespace pipelane::cuda_test
