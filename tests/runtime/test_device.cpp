// The CPU backend: kind, threads, flush-to-zero, streams and events; and TensorView.
#include <gtest/gtest.h>
#include <omp.h>
#include <pmmintrin.h>
#include <xmmintrin.h>

#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/tensor.h"

namespace pipelane {
namespace {

// Restores MXCSR on this thread and the OpenMP workers, so FTZ does not leak into other tests
// running in the same process.
class MxcsrGuard {
 public:
  MxcsrGuard() : saved_(_mm_getcsr()) {}
  ~MxcsrGuard() {
    const unsigned saved = saved_;
#pragma omp parallel num_threads(2)
    _mm_setcsr(saved);
    _mm_setcsr(saved);
  }

 private:
  unsigned saved_;
};

void disable_flush_denormals_on_this_thread() {
  _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_OFF);
  _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_OFF);
}

// A product whose exact result (1e-40) is a denormal float.
float denormal_product() {
  volatile float x = 1e-30f;
  volatile float y = 1e-10f;
  return x * y;
}

TEST(CpuBackend, ReportsKindNameAndThreads) {
  MxcsrGuard guard;
  const int before = omp_get_max_threads();
  auto dev = make_cpu_backend(2);
  EXPECT_EQ(dev->kind(), DeviceKind::Cpu);
  EXPECT_EQ(dev->threads(), 2);
  EXPECT_NE(dev->name().find("cpu"), std::string::npos) << dev->name();
  EXPECT_NE(dev->name().find('2'), std::string::npos) << dev->name();
  EXPECT_EQ(omp_get_max_threads(), before);  // the caller's setting is not the backend's
}

// The thread count belongs to the backend instance: its ops run with it, and neither creating
// a second backend nor running its ops changes the caller's or the first backend's threads.
// Observed from inside an op: the vocab-parallel head calls its group callbacks on the calling
// thread, outside any parallel region, while the op runs.
TEST(CpuBackend, OpsRunWithTheInstancesThreadCountAndRestoreTheCallers) {
  MxcsrGuard guard;
  omp_set_num_threads(3);
  auto two = make_cpu_backend(2);
  auto one = make_cpu_backend(1);
  auto stream = two->create_stream(StreamPriority::High);
  const auto threads_seen_inside = [&](Backend& b) {
    int seen = -1;
    const GroupReduce reduce{[&](float*, std::size_t) { seen = omp_get_max_threads(); },
                             [&](float*, std::size_t) { seen = omp_get_max_threads(); }};
    const int N = 2, C = 4, V = 8;
    std::vector<float> losses(N), x(N * C, 0.1f), wte(V * C, 0.2f);
    std::vector<std::int32_t> targets{1, 2};
    std::vector<float> scratch(b.lm_head_vocab_parallel_scratch_floats(N, V));
    b.lm_head_cross_entropy_vocab_parallel(losses.data(), nullptr, nullptr, x.data(), wte.data(),
                                           targets.data(), N, C, V, 0, V, 1.f, scratch.data(),
                                           reduce, *stream);
    return seen;
  };
  EXPECT_EQ(threads_seen_inside(*two), 2);
  EXPECT_EQ(threads_seen_inside(*one), 1);
  EXPECT_EQ(threads_seen_inside(*two), 2);
  EXPECT_EQ(omp_get_max_threads(), 3);
}

TEST(CpuBackend, DefaultThreadCountIsPositive) {
  MxcsrGuard guard;
  const int before = omp_get_max_threads();
  auto dev = make_cpu_backend();
  EXPECT_GE(dev->threads(), 1);
  omp_set_num_threads(before);
}

TEST(CpuBackend, TurnsOnFlushToZeroOnTheCallerAndTheWorkers) {
  MxcsrGuard guard;
  const int before = omp_get_max_threads();
  // Start from gradual underflow everywhere, and check that it is observable.
  disable_flush_denormals_on_this_thread();
#pragma omp parallel num_threads(2)
  disable_flush_denormals_on_this_thread();
  ASSERT_FALSE(flush_denormals_enabled_on_this_thread());
  ASSERT_NE(denormal_product(), 0.0f) << "denormals are flushed before the device exists";

  auto dev = make_cpu_backend(2);
  EXPECT_TRUE(flush_denormals_enabled_on_this_thread());
  EXPECT_EQ(denormal_product(), 0.0f);
  std::vector<int> worker_ftz(2, -1);
  std::vector<float> worker_product(2, -1.0f);
#pragma omp parallel num_threads(2)
  {
    const int t = omp_get_thread_num();
    worker_ftz[t] = flush_denormals_enabled_on_this_thread() ? 1 : 0;
    worker_product[t] = denormal_product();
  }
  for (int t = 0; t < 2; ++t) {
    EXPECT_EQ(worker_ftz[t], 1) << "OpenMP thread " << t;
    EXPECT_EQ(worker_product[t], 0.0f) << "OpenMP thread " << t;
  }
  omp_set_num_threads(before);
}

TEST(CpuBackend, EnableFlushDenormalsOnThisThreadOnly) {
  MxcsrGuard guard;
  disable_flush_denormals_on_this_thread();
  EXPECT_FALSE(flush_denormals_enabled_on_this_thread());
  enable_flush_denormals_on_this_thread();
  EXPECT_TRUE(flush_denormals_enabled_on_this_thread());
  EXPECT_EQ(denormal_product(), 0.0f);
  // Turning it on in another thread leaves this one alone.
  disable_flush_denormals_on_this_thread();
  bool other = false;
  std::thread([&] {
    enable_flush_denormals_on_this_thread();
    other = flush_denormals_enabled_on_this_thread();
  }).join();
  EXPECT_TRUE(other);
  EXPECT_FALSE(flush_denormals_enabled_on_this_thread());
  EXPECT_NE(denormal_product(), 0.0f);
}

TEST(CpuBackend, StreamsKeepTheirPriority) {
  MxcsrGuard guard;
  const int before = omp_get_max_threads();
  auto dev = make_cpu_backend(2);
  for (StreamPriority p : {StreamPriority::High, StreamPriority::Normal, StreamPriority::Low}) {
    auto s = dev->create_stream(p);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->priority(), p);
    EXPECT_NO_THROW(s->synchronize());
  }
  auto high = dev->create_stream(StreamPriority::High);
  auto low = dev->create_stream(StreamPriority::Low);
  EXPECT_EQ(high->priority(), StreamPriority::High);  // independent objects
  EXPECT_EQ(low->priority(), StreamPriority::Low);
  omp_set_num_threads(before);
}

TEST(CpuBackend, EventsRecordAndMeasureElapsedTime) {
  MxcsrGuard guard;
  const int before = omp_get_max_threads();
  auto dev = make_cpu_backend(2);
  auto stream = dev->create_stream(StreamPriority::High);
  auto start = dev->create_event(), stop = dev->create_event();
  EXPECT_FALSE(start->query());
  EXPECT_THROW(stop->elapsed_ms_since(*start), std::logic_error);  // neither recorded
  start->record(*stream);
  EXPECT_TRUE(start->query());
  EXPECT_THROW(stop->elapsed_ms_since(*start), std::logic_error);  // stop not recorded
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  stop->record(*stream);
  EXPECT_TRUE(stop->query());
  EXPECT_NO_THROW(stop->synchronize());
  const double ms = stop->elapsed_ms_since(*start);
  EXPECT_GE(ms, 0.0);
  EXPECT_GE(ms, 4.9);     // the sleep is inside the interval
  EXPECT_LT(ms, 5000.0);  // and it is in milliseconds, not microseconds
  EXPECT_DOUBLE_EQ(start->elapsed_ms_since(*start), 0.0);
  omp_set_num_threads(before);
}

TEST(TensorView, ShapeBytesAndDescription) {
  std::vector<float> buf(4 * 64);
  TensorView t(buf.data(), {4, 64});
  EXPECT_EQ(t.ndim, 2);
  EXPECT_EQ(t.numel(), 256);
  EXPECT_EQ(t.bytes(), 1024u);
  EXPECT_EQ(t.describe(), "f32[4,64]");
  EXPECT_EQ(t.f32(), buf.data());
  EXPECT_EQ(t.device, DeviceKind::Cpu);

  TensorView h(buf.data(), {2, 3, 5}, DType::BF16);
  EXPECT_EQ(h.numel(), 30);
  EXPECT_EQ(h.bytes(), 60u);
  EXPECT_EQ(h.describe(), "bf16[2,3,5]");
  EXPECT_THROW(h.f32(), std::logic_error);
  EXPECT_THROW(TensorView(buf.data(), {1, 2, 3, 4, 5}), std::invalid_argument);

  EXPECT_EQ(dtype_size(DType::F32), 4u);
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::U16), 2u);
  EXPECT_EQ(dtype_size(DType::U32), 4u);
  EXPECT_EQ(dtype_size(DType::I32), 4u);
  EXPECT_STREQ(dtype_name(DType::I32), "i32");
}

}  // namespace
}  // namespace pipelane
