// The CUDA backend's own logic on the fake device (runtime/cuda/emu/): streams really are
// asynchronous and ordered by events, priorities map onto the device's range, arenas refuse past
// their quota or the device's memory, pool arenas refuse past the pool's maxSize, every buffer an
// op is handed must be device memory, a kernel's launch error surfaces at the next synchronisation,
// and an SM partition that cannot be had is one clear error. (The ops' numerics are in
// tests/runtime/test_backend_ops.cpp, where the same backend runs as "cuda-emulated".)
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "runtime/cuda/backend/cuda_memory.h"
#include "runtime/cuda/backend/cuda_streams.h"
#include "runtime/cuda/emu/emulated_backend.h"
#include "runtime/cuda/emu/fake_cuda_runtime.h"

namespace pipelane::cuda_test {
namespace {

using cuda_emu::make_emulated_cuda_backend;

// A host function that holds its stream until release() (deferred streams only).
class Gate {
 public:
  void hold(Stream& s) {
    check(cudaLaunchHostFunc(
        cuda::cuda_stream(s).handle(),
        [](void* self) {
          auto* g = static_cast<Gate*>(self);
          while (!g->open_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        },
        this));
  }
  void release() { open_.store(true); }

 private:
  static void check(cudaError_t e) { ASSERT_EQ(e, cudaSuccess); }
  std::atomic<bool> open_{false};
};

TEST(CudaBackendStreams, WorkRunsInStreamOrderAfterTheCall) {
  auto backend = make_emulated_cuda_backend();
  auto s = backend->create_stream(StreamPriority::High);
  auto arena = backend->create_arena("t", 4096);
  auto pinned = backend->create_arena("p", 4096, MemoryKind::PinnedHost);
  float* x = arena->allocate_n<float>(4);
  float* host = pinned->allocate_n<float>(4);
  const float ones[4] = {1, 1, 1, 1};
  backend->copy(x, ones, sizeof ones, *s);
  Gate gate;
  gate.hold(*s);
  backend->scale(x, 3.f, 4, *s);
  backend->copy(host, x, 4 * sizeof(float), *s);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(host[0], 0.f) << "pinned copy landed before its stream got there";
  gate.release();
  s->synchronize();
  EXPECT_EQ(host[0], 3.f);
  EXPECT_EQ(host[3], 3.f);
}

TEST(CudaBackendStreams, EventsOrderWorkAcrossStreams) {
  auto backend = make_emulated_cuda_backend();
  auto compute = backend->create_stream(StreamPriority::High);
  auto comm = backend->create_stream(StreamPriority::Normal);
  auto arena = backend->create_arena("t", 4096);
  float* a = arena->allocate_n<float>(1);
  float* b = arena->allocate_n<float>(1);
  const float seven = 7.f;
  Gate gate;
  gate.hold(*compute);
  backend->copy(a, &seven, sizeof seven, *compute);
  auto produced = backend->create_event();
  produced->record(*compute);
  EXPECT_FALSE(produced->query());
  produced->wait_on(*comm);
  backend->copy(b, a, sizeof(float), *comm);  // must see the 7
  gate.release();
  float got = 0.f;
  backend->copy(&got, b, sizeof got, *comm);  // into pageable memory: complete on return
  EXPECT_EQ(got, 7.f);
  EXPECT_TRUE(produced->query());
}

TEST(CudaBackendStreams, ElapsedTimeComesFromTheStream) {
  auto backend = make_emulated_cuda_backend();
  auto s = backend->create_stream(StreamPriority::Low);
  auto start = backend->create_event(), end = backend->create_event();
  start->record(*s);
  // 30 ms of "kernel" between the two records, on the stream itself.
  ASSERT_EQ(cudaLaunchHostFunc(
                cuda::cuda_stream(*s).handle(),
                [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(30)); }, nullptr),
            cudaSuccess);
  end->record(*s);
  end->synchronize();
  EXPECT_GE(end->elapsed_ms_since(*start), 30.0);
}

TEST(CudaBackendStreams, PrioritiesSpanTheDeviceRange) {
  EXPECT_EQ(cuda::stream_priorities(0, -5).high, -5);
  EXPECT_EQ(cuda::stream_priorities(0, -5).normal, -4);
  EXPECT_EQ(cuda::stream_priorities(0, -5).low, 0);
  const cuda::StreamPriorities one = cuda::stream_priorities(0, 0);  // a device without priorities
  EXPECT_EQ(one.high, 0);
  EXPECT_EQ(one.normal, 0);
  auto backend = make_emulated_cuda_backend();
  for (const auto [p, want] : {std::pair{StreamPriority::High, -5}, {StreamPriority::Normal, -4},
                               {StreamPriority::Low, 0}}) {
    auto s = backend->create_stream(p);
    int got = 99;
    ASSERT_EQ(cudaStreamGetPriority(cuda::cuda_stream(*s).handle(), &got), cudaSuccess);
    EXPECT_EQ(got, want) << stream_priority_name(p);
  }
}

TEST(CudaBackendMemory, ArenasRefusePastTheirQuotaAndTheDevice) {
  auto backend = make_emulated_cuda_backend();
  auto arena = backend->create_arena("training", 1024);
  EXPECT_EQ(arena->kind(), MemoryKind::Device);
  arena->allocate(1000);
  EXPECT_THROW(arena->allocate(100), ArenaQuotaError);
  cuda_emu::set_device_capacity(std::size_t{64} << 20);
  try {
    backend->create_arena("too big", std::size_t{128} << 20);
    ADD_FAILURE() << "an arena larger than the device was created";
  } catch (const ArenaQuotaError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot reserve"), std::string::npos) << e.what();
  }
  cuda_emu::set_device_capacity(std::size_t{4} << 30);
}

TEST(CudaBackendMemory, PoolArenasRefusePastThePoolsMaxSize) {
  auto backend = make_emulated_cuda_backend();
  auto lane = backend->create_pool_arena("lane", 3 << 20);
  lane->allocate(3 << 20);
  EXPECT_THROW(lane->allocate(1), ArenaQuotaError);  // the arena's own quota
  // The pool refuses a reservation past its maxSize (the quota rounded up to 2 MiB).
  cuda::PoolMemory pool(0, 3 << 20);
  EXPECT_EQ(pool.max_size(), std::size_t{4} << 20);
  EXPECT_THROW(Arena("over", std::size_t{5} << 20, pool), ArenaQuotaError);
  {
    Arena fits("fits", std::size_t{4} << 20, pool);
    EXPECT_EQ(pool.used_bytes(), std::uint64_t{4} << 20);
  }
  cudaDeviceSynchronize();  // the release is stream-ordered
  EXPECT_EQ(pool.used_bytes(), 0u);
  EXPECT_EQ(pool.used_high(), std::uint64_t{4} << 20);
}

TEST(CudaBackendMemory, OpsRefuseHostBuffers) {
  auto backend = make_emulated_cuda_backend();
  auto s = backend->create_stream(StreamPriority::High);
  std::vector<float> host(16, 1.f);
  try {
    backend->scale(host.data(), 2.f, host.size(), *s);
    ADD_FAILURE() << "a host buffer reached a kernel";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("scale: buffer argument 0 is not device memory"), std::string::npos);
  }
}

TEST(CudaBackendErrors, ALaunchErrorSurfacesAtTheNextSynchronisation) {
  auto backend = make_emulated_cuda_backend();
  auto s = backend->create_stream(StreamPriority::High);
  auto arena = backend->create_arena("t", 1 << 20);
  // A head size over 1024 makes the attention's fix-up kernel ask for too many threads.
  const int T = 1, C = 1056, NH = 1;
  float* qkv = arena->allocate_n<float>(3 * C);
  float* out = arena->allocate_n<float>(C);
  float* att = arena->allocate_n<float>(1);
  backend->attention_forward(out, att, qkv, 1, T, C, NH, *s);  // enqueued: no error yet
  try {
    s->synchronize();
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cudaErrorLaunchFailure"), std::string::npos) << e.what();
  }
  EXPECT_NE(cuda_emu::last_error_message().find("attention_causal_fixup_kernel"), std::string::npos)
      << cuda_emu::last_error_message();
  cuda_emu::clear_sticky_error();
}

TEST(CudaBackendLanes, AnSmPartitionThatCannotBeHadIsOneClearError) {
  cuda::CudaBackendConfig config = cuda_emu::emulated_backend_config();
  config.lane_sm_partition = 8;
  try {
    make_emulated_cuda_backend(config);
    ADD_FAILURE() << "the fake device has no green contexts";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[lanes] sm_partition: the driver has no cuDeviceGet"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos);
  }
}

}  // namespace
}  // namespace pipelane::cuda_test
