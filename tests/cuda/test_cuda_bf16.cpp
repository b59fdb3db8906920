// The CUDA backend's bf16 composed ops (CudaBf16Ops: bf16 storage, fp32 arithmetic and GEMM
// accumulation, fp32 parameter gradients) against the CPU's fp32 ops on the same inputs rounded to
// bf16: on the emulated build in CI (test_cuda_backend), and the same source on a GPU with
// cuBLASLt (test_cuda_gpu, which skips without a device; scripts/gpu_check.sh runs it). Tolerance: llm.c's |got - want| <= atol + 0.079 |want| with atol two
// bf16 ulps of the largest element, and NMSE 1e-4 (a few bf16 roundings of 2^-9 each: the outputs,
// and intermediates the fp32 path keeps in fp32: scores, probabilities, logits, dlogits).
#include <gtest/gtest.h>

#include <random>

#include "runtime/cpu/cpu_ops.h"
#include "tests/cuda/compare.h"
#include "tests/support/backend_buffers.h"
#if PIPELANE_TEST_REAL_CUDA
#include <cuda_runtime_api.h>

#include "runtime/cuda/backend/cublaslt_engine.h"
#include "runtime/cuda/cuda_backend.h"
#else
#include "runtime/cuda/emu/emulated_backend.h"
#include "runtime/cuda/emu/fake_cuda_runtime.h"
#endif

namespace pipelane::cuda_test {
namespace {

using bf16 = __nv_bfloat16;

// Buffers in the (emulated) device's memory; values(): a download as doubles.
class Device : public testing::BackendBuffers {
 public:
  explicit Device(Backend& backend) : BackendBuffers(backend, "bf16 test", std::size_t{16} << 20) {}
  template <typename T>
  Vec values(const T* p, std::size_t n) {
    Vec out;
    for (const T& x : download(p, n)) out.push_back(static_cast<double>(static_cast<float>(x)));
    return out;
  }
};

std::vector<float> random_floats(std::mt19937& rng, std::size_t n, float scale = 1.f) {
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(__float2bfloat16_rn(d(rng)));  // exactly representable in bf16
  return v;
}
std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> out;
  for (float x : v) out.push_back(__float2bfloat16_rn(x));
  return out;
}
Vec as_vec(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

::testing::AssertionResult near(const std::string& what, const Vec& got, const std::vector<float>& want) {
  return compare(what, got, as_vec(want), Tolerance{kBf16Nmse}, true);
}

#if PIPELANE_TEST_REAL_CUDA
bool have_device() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}
std::unique_ptr<cuda::CudaBackend> test_backend() {
  if (!have_device()) return nullptr;
  return cuda::make_cuda_backend({}, cuda::make_cublaslt_engine());
}
#else
std::unique_ptr<cuda::CudaBackend> test_backend() {
  cuda_emu::set_stream_mode(cuda_emu::StreamMode::Deferred);
  return cuda_emu::make_emulated_cuda_backend();
}
#endif

class CudaBf16 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!backend_) GTEST_SKIP() << "no CUDA device";
  }
  std::unique_ptr<cuda::CudaBackend> backend_ = test_backend();
  cuda::CudaBf16Ops* ops_ = backend_ ? &backend_->bf16_ops() : nullptr;
  std::mt19937 rng_{20261130u};
  const int B = 2, T = 5, C = 36, NH = 3, N = B * T, OC = 3 * C + 1;
};

TEST_F(CudaBf16, MatmulForwardAndBackward) {
  Device d(*backend_);
  const auto x = random_floats(rng_, N * C), w = random_floats(rng_, OC * C, 0.3f), b = random_floats(rng_, OC, 0.3f);
  const auto dy = random_floats(rng_, N * OC), dw0 = random_floats(rng_, OC * C), db0 = random_floats(rng_, OC);
  bf16* out = d.upload(std::vector<bf16>(N * OC));
  bf16 *gx = d.upload(to_bf16(x)), *gw = d.upload(to_bf16(w)), *gb = d.upload(to_bf16(b));
  ops_->matmul_forward(out, gx, gw, gb, N, C, OC, d.stream());
  std::vector<float> want(N * OC);
  cpu::matmul_forward(want.data(), x.data(), w.data(), b.data(), N, C, OC);
  EXPECT_TRUE(near("out", d.values(out, want.size()), want));

  bf16* dinp = d.upload(std::vector<bf16>(N * C));
  float *dw = d.upload(dw0), *db = d.upload(db0);
  ops_->matmul_backward(dinp, dw, db, d.upload(to_bf16(dy)), gx, gw, N, C, OC, d.stream());
  std::vector<float> cdinp(N * C), cdw = dw0, cdb = db0;
  cpu::matmul_backward(cdinp.data(), cdw.data(), cdb.data(), dy.data(), x.data(), w.data(), N, C, OC);
  EXPECT_TRUE(near("dinp", d.values(dinp, cdinp.size()), cdinp));
  EXPECT_TRUE(near("dweight (fp32)", d.values(dw, cdw.size()), cdw));
  EXPECT_TRUE(near("dbias (fp32)", d.values(db, cdb.size()), cdb));
}

TEST_F(CudaBf16, AttentionForwardAndBackward) {
  Device d(*backend_);
  const std::size_t na = static_cast<std::size_t>(B) * NH * T * T;
  const auto qkv = random_floats(rng_, N * 3 * C), dout = random_floats(rng_, N * C);
  bf16 *out = d.upload(std::vector<bf16>(N * C)), *att = d.upload(std::vector<bf16>(na));
  bf16* gqkv = d.upload(to_bf16(qkv));
  ops_->attention_forward(out, att, gqkv, B, T, C, NH, d.stream());
  std::vector<float> cout(N * C), catt(na), cdqkv(N * 3 * C);
  cpu::attention_forward(cout.data(), catt.data(), qkv.data(), B, T, C, NH);
  EXPECT_TRUE(near("out", d.values(out, cout.size()), cout));
  EXPECT_TRUE(near("att", d.values(att, na), catt));
  bf16* dqkv = d.upload(std::vector<bf16>(N * 3 * C));
  ops_->attention_backward(dqkv, d.upload(to_bf16(dout)), gqkv, att, B, T, C, NH, d.stream());
  cpu::attention_backward(cdqkv.data(), dout.data(), qkv.data(), catt.data(), B, T, C, NH);
  EXPECT_TRUE(near("dqkv", d.values(dqkv, cdqkv.size()), cdqkv));
}

TEST_F(CudaBf16, LmHeadCrossEntropy) {
  Device d(*backend_);
  const int V = 13, Vp = 16;
  const auto x = random_floats(rng_, N * C), wte = random_floats(rng_, Vp * C), dwte0 = random_floats(rng_, Vp * C);
  std::vector<std::int32_t> targets(N);
  for (int n = 0; n < N; ++n) targets[n] = (n * 5 + 3) % V;
  float *losses = d.upload(std::vector<float>(N)), *dwte = d.upload(dwte0);
  bf16* dx = d.upload(std::vector<bf16>(N * C));
  bf16* scratch = d.upload(std::vector<bf16>(backend_->lm_head_scratch_floats(N, Vp)));
  const float scale = 1.0f / N;
  const double sum = ops_->lm_head_cross_entropy(losses, dx, dwte, d.upload(to_bf16(x)), d.upload(to_bf16(wte)),
                                                targets.data(), N, C, V, Vp, scale, scratch, d.stream());
  std::vector<float> closses(N), cdx(N * C), cdwte = dwte0;
  std::vector<float> cscratch(static_cast<std::size_t>(cpu::lm_head_chunk_rows(N, Vp)) * Vp);
  const double csum = cpu::lm_head_cross_entropy(closses.data(), cdx.data(), cdwte.data(), x.data(), wte.data(),
                                                 targets.data(), N, C, V, Vp, scale, cscratch.data());
  EXPECT_TRUE(near("losses", d.values(losses, N), closses));
  EXPECT_NEAR(sum, csum, 0.079 * std::abs(csum));
  EXPECT_TRUE(near("dx", d.values(dx, cdx.size()), cdx));
  EXPECT_TRUE(near("dwte (fp32)", d.values(dwte, cdwte.size()), cdwte));
}

// The fp32 master weights take exactly the fp32 step; the copy is their rounding to bf16.
TEST_F(CudaBf16, AdamWWritesTheBf16CopyOfTheFp32Masters) {
  Device d(*backend_);
  const std::size_t n = 1000;
  const auto p0 = random_floats(rng_, n), g = random_floats(rng_, n), m0 = random_floats(rng_, n, 0.1f);
  const std::vector<float> v0(n, 0.02f);
  const AdamWParams h{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3};
  float *p = d.upload(p0), *m = d.upload(m0), *v = d.upload(v0), *gg = d.upload(g);
  bf16* copy = d.upload(std::vector<bf16>(n));
  ops_->adamw_update(p, gg, m, v, n, h, 0.5f, copy, d.stream());
  float *p32 = d.upload(p0), *m32 = d.upload(m0), *v32 = d.upload(v0);
  backend_->adamw_update(p32, gg, m32, v32, n, h, 0.5f, d.stream());
  const auto masters = d.download(p, n), fp32 = d.download(p32, n);
  const auto copies = d.download(copy, n);
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(masters[i], fp32[i]) << i;
    ASSERT_EQ(static_cast<float>(copies[i]), static_cast<float>(__float2bfloat16_rn(masters[i]))) << i;
  }
}

}  // namespace
}  // namespace pipelane::cuda_test
