// `[model] attention = cudnn` (backend/cuda_backend_cudnn.cpp): the CUDA backend's attention as
// cuDNN operation graphs, against the CPU backend's attention, fp32 and bf16 compute, odd sizes
// (T = 1, C not a multiple of 32, T not a multiple of anything). On the emulated build (CI) the
// graphs run through the graph interpreter, so this proves the backend's side: buffers, element
// offsets, the statistics saved in `att` and nothing more (guard floats after every buffer), the
// bf16 copies and their widening. The same source on a GPU (test_cuda_gpu, skipped without a
// device; scripts/gpu_check.sh) runs cuDNN itself: whether an engine fuses the graph is known
// only there. On the emulated build also a tiny GPT trained through the executor with it.
#include <gtest/gtest.h>

#include <random>
#include <span>

#include "runtime/cpu/cpu_backend.h"
#include "tests/cuda/compare.h"
#include "tests/cuda/test_backends.h"
#if !PIPELANE_TEST_REAL_CUDA
#include "tests/cuda/training_parity.h"
#endif

namespace pipelane::cuda_test {
namespace {

std::unique_ptr<cuda::CudaBackend> cudnn_backend(DType compute) {
  return cuda_backend_for_test(compute, cuda::AttentionImpl::Cudnn);
}

constexpr std::size_t kGuard = 64;
constexpr float kSentinel = -7.8125e-3f;

// Buffers on a backend, each followed by kGuard sentinel floats that must survive every op.
class Buffers {
 public:
  explicit Buffers(Backend& backend)
      : backend_(backend), stream_(backend.create_stream(StreamPriority::High)),
        arena_(backend.create_arena("cudnn attention test", std::size_t{16} << 20)) {}
  float* upload(std::vector<float> host) {
    const std::size_t n = host.size();
    host.resize(n + kGuard, kSentinel);
    float* p = arena_->allocate_n<float>(host.size());
    backend_.copy(p, host.data(), host.size() * sizeof(float), *stream_);
    guarded_.push_back({p, n});
    return p;
  }
  float* zeros(std::size_t n) { return upload(std::vector<float>(n, 0.f)); }
  std::vector<float> download(const float* p, std::size_t n) {
    std::vector<float> out(n);
    backend_.copy(out.data(), p, n * sizeof(float), *stream_);
    stream_->synchronize();
    return out;
  }
  int damaged_guards() {
    int damaged = 0;
    for (const auto& [p, n] : guarded_)
      for (float x : download(p + n, kGuard)) damaged += x != kSentinel;
    return damaged;
  }
  Stream& stream() { return *stream_; }

 private:
  Backend& backend_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<Arena> arena_;
  std::vector<std::pair<const float*, std::size_t>> guarded_;
};

std::vector<float> random_floats(std::mt19937& rng, std::size_t n) {
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

Vec doubles(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

struct AttentionResult {
  std::vector<float> out, dqkv;
};

// Forward then backward on `backend`, with att sized as the backend asks.
AttentionResult run_attention(Backend& backend, const std::vector<float>& qkv, const std::vector<float>& dout, int B,
                              int T, int C, int NH, int* damaged) {
  Buffers b(backend);
  const std::size_t n = static_cast<std::size_t>(B) * T * C;
  float* q = b.upload(qkv);
  float* out = b.zeros(n);
  float* att = b.zeros(backend.attention_saved_floats(B, T, C, NH));
  float* dqkv = b.upload(std::vector<float>(3 * n, 5.f));  // overwritten
  backend.attention_forward(out, att, q, B, T, C, NH, b.stream());
  backend.attention_backward(dqkv, b.upload(dout), q, out, att, B, T, C, NH, b.stream());
  AttentionResult r{b.download(out, n), b.download(dqkv, 3 * n)};
  *damaged = b.damaged_guards();
  return r;
}

struct Shape {
  int B, T, C, NH;
};

// T = 1; C = 12 and 40 (not multiples of 32), head sizes 4 and 8; T = 17 and 33.
constexpr Shape kShapes[] = {{2, 5, 12, 3}, {1, 1, 8, 2}, {1, 17, 16, 2}, {2, 33, 40, 5}};

// The size the cuDNN MFU stage trains at (head size 64; cuDNN's fused engines are built for it):
// gpu_check's gate for that stage, where the odd sizes above may well find no engine.
constexpr Shape kRealisticShapes[] = {{1, 128, 128, 2}};

void expect_matches_cpu(DType compute, std::span<const Shape> shapes = kShapes) {
  const auto cuda = cudnn_backend(compute);
  if (!cuda) GTEST_SKIP() << "no CUDA device";
  const auto cpu = make_cpu_backend(1, compute);
  const bool bf = compute == DType::BF16;
  for (const auto [B, T, C, NH] : shapes) {
    SCOPED_TRACE(::testing::Message() << dtype_name(compute) << " B=" << B << " T=" << T << " C=" << C
                                      << " NH=" << NH);
    EXPECT_EQ(cuda->attention_saved_floats(B, T, C, NH), static_cast<std::size_t>(B) * NH * T);
    std::mt19937 rng(7u * C + T);
    const std::size_t n = static_cast<std::size_t>(B) * T * C;
    const std::vector<float> qkv = random_floats(rng, 3 * n), dout = random_floats(rng, n);
    int damaged = 0, cpu_damaged = 0;
    const AttentionResult got = run_attention(*cuda, qkv, dout, B, T, C, NH, &damaged);
    const AttentionResult want = run_attention(*cpu, qkv, dout, B, T, C, NH, &cpu_damaged);
    EXPECT_EQ(damaged, 0) << "written past a buffer's end (att holds only the statistics)";
    EXPECT_EQ(cpu_damaged, 0);
    // fp32: the graph's algebra (statistics instead of probabilities) in another order than the CPU
    // op, as the graph tests allow. bf16: the CPU rounds q, k, v and the probabilities for its
    // GEMMs; the graph also stores out, and reads out and dout, in bf16: a few roundings of 2^-9.
    const Tolerance tol{bf ? kBf16Nmse : 1e-10};
    EXPECT_TRUE(compare("out", doubles(got.out), doubles(want.out), tol, bf));
    EXPECT_TRUE(compare("dqkv", doubles(got.dqkv), doubles(want.dqkv), tol, bf));
  }
}

TEST(CudnnAttention, Fp32MatchesTheCpuBackend) { expect_matches_cpu(DType::F32); }
TEST(CudnnAttention, Bf16ComputeMatchesTheCpuBackendInBf16) { expect_matches_cpu(DType::BF16); }
TEST(CudnnAttention, Bf16ComputeAtHeadSize64MatchesTheCpuBackend) { expect_matches_cpu(DType::BF16, kRealisticShapes); }

#if !PIPELANE_TEST_REAL_CUDA
// The executor's tiny GPT with the cuDNN attention against the CPU backend: within 1e-5 relative
// in fp32, as the cuBLASLt attention's training test (test_cuda_training.cpp).
TEST(CudnnAttention, TrainingMatchesTheCpuBackend) {
  const TrainRun want = train_one_process(*make_cpu_backend(1));
  expect_close(train_one_process(*cudnn_backend(DType::F32)), want);
}
#endif

}  // namespace
}  // namespace pipelane::cuda_test
