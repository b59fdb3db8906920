// The CNN lanes' kernels (kernels/cnn_*.cuh), emulated, against the CPU backend's loops
// (runtime/cpu/cpu_ops_cnn.h) bit for bit: both compute every element with the same fp32/double
// operations in the same order (the gathers add an input element's contributions in ascending
// output row, which is the order of the CPU's scatter; batch norm's sums run over rows in order),
// so any difference is a wrong index, a missed or doubled contribution or a changed order. Odd
// shapes (ResNet's 7x7/2 stem, 3x3/2 max pooling, a 1x1/2 downsampling, overlapping adaptive
// windows), phases in blocks with odd boundaries, gradients accumulating onto random values,
// sentinels around every output (ASan in the sanitizer builds), two runs bit-identical (the
// emulator permutes the block order). Value checks against PyTorch are test_cuda_cnn_lanes'.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "runtime/cpu/cpu_ops_cnn.h"
#include "runtime/cuda/kernels/cnn_batch_norm.cuh"
#include "runtime/cuda/kernels/cnn_conv.cuh"
#include "runtime/cuda/kernels/cnn_pooling.cuh"
#include "tests/cuda/kernel_check.h"

// A namespace of its own: the emulated test executables are unity builds.
namespace pipelane::cuda_test::cnn_kernels_test {
namespace {

::testing::AssertionResult same_bits(const std::string& what, const Guarded<float>& got,
                                     const std::vector<float>& cpu) {
  if (!got.guards_intact()) return ::testing::AssertionFailure() << what << ": sentinel bytes changed";
  if (got.size() == cpu.size() && std::memcmp(got.data(), cpu.data(), cpu.size() * sizeof(float)) == 0)
    return ::testing::AssertionSuccess();
  std::size_t i = 0;
  while (i < cpu.size() && std::memcmp(got.data() + i, cpu.data() + i, sizeof(float)) == 0) ++i;
  return ::testing::AssertionFailure() << what << ": differs from the CPU op first at [" << i << "]: "
                                       << got.data()[i] << " vs " << cpu[i];
}

struct Blocks {
  std::vector<std::pair<std::int64_t, std::int64_t>> list;
};
// [0, rows) cut at odd points.
Blocks cut(std::int64_t rows, std::int64_t first) {
  Blocks b;
  for (std::int64_t r0 = 0, size = first; r0 < rows; r0 += size, size = size * 2 + 1)
    b.list.push_back({r0, std::min(rows, r0 + size)});
  return b;
}

int out_side(int in, int kernel, int stride, int pad) { return (in + 2 * pad - kernel) / stride + 1; }

CnnWindow window(int n, int h, int w, int c, int kernel, int stride, int pad) {
  return {n, h, w, c, out_side(h, kernel, stride, pad), out_side(w, kernel, stride, pad), kernel, stride, pad};
}

std::int64_t rows_of(const CnnWindow& g) { return static_cast<std::int64_t>(g.n) * g.out_h * g.out_w; }
std::size_t input_size(const CnnWindow& g) { return static_cast<std::size_t>(g.n) * g.h * g.w * g.c; }

class CnnKernels : public ::testing::TestWithParam<CnnWindow> {};

TEST_P(CnnKernels, Im2colAndCol2imAreTheCpuOps) {
  const CnnWindow g = GetParam();
  std::mt19937 rng(11);
  const std::size_t patch = static_cast<std::size_t>(g.kernel) * g.kernel * g.c;
  const std::int64_t rows = rows_of(g);
  const auto in = random_values<float>(rng, input_size(g));
  const auto din0 = random_values<float>(rng, input_size(g));
  const auto dcols = random_values<float>(rng, static_cast<std::size_t>(rows) * patch);
  Guarded<float> din_a(din0), din_b(din0);
  std::vector<float> din_cpu(din0);
  for (const auto& [r0, r1] : cut(rows, 3).list) {
    const std::size_t n = static_cast<std::size_t>(r1 - r0) * patch;
    Guarded<float> cols(n);
    std::vector<float> cols_cpu(n);
    cuda::cnn_im2col(cols.data(), in.data(), g, r0, r1, nullptr);
    cpu::cnn_im2col(cols_cpu.data(), in.data(), g, r0, r1);
    ASSERT_TRUE(same_bits("im2col [" + std::to_string(r0) + ", " + std::to_string(r1) + ")", cols, cols_cpu));
    const float* d = dcols.data() + static_cast<std::size_t>(r0) * patch;
    cuda::cnn_col2im(din_a.data(), d, g, r0, r1, nullptr);
    cuda::cnn_col2im(din_b.data(), d, g, r0, r1, nullptr);
    cpu::cnn_col2im(din_cpu.data(), d, g, r0, r1);
  }
  EXPECT_TRUE(same_bits("col2im", din_a, din_cpu));
  EXPECT_TRUE(bit_identical("col2im", din_a, din_b));
}

TEST_P(CnnKernels, MaxPoolingIsTheCpuOp) {
  const CnnWindow g = GetParam();
  std::mt19937 rng(12);
  const std::int64_t rows = rows_of(g);
  const std::size_t out_n = static_cast<std::size_t>(rows) * g.c;
  const auto in = random_values<float>(rng, input_size(g));
  const auto din0 = random_values<float>(rng, input_size(g)), dout = random_values<float>(rng, out_n);
  Guarded<float> out(out_n);
  Guarded<std::int64_t> argmax(out_n);
  std::vector<float> out_cpu(out_n);
  std::vector<std::int64_t> argmax_cpu(out_n);
  for (const auto& [r0, r1] : cut(rows, 2).list) {
    cuda::max_pool_forward(out.data(), argmax.data(), in.data(), g, r0, r1, nullptr);
    cpu::max_pool_forward(out_cpu.data(), argmax_cpu.data(), in.data(), g, r0, r1);
  }
  ASSERT_TRUE(same_bits("max_pool_forward", out, out_cpu));
  ASSERT_TRUE(intact("argmax", argmax));
  ASSERT_EQ(argmax.values(), argmax_cpu);
  Guarded<float> din_a(din0), din_b(din0);
  std::vector<float> din_cpu(din0);
  for (const auto& [r0, r1] : cut(rows, 4).list) {
    cuda::max_pool_backward(din_a.data(), dout.data(), argmax.data(), g, r0, r1, nullptr);
    cuda::max_pool_backward(din_b.data(), dout.data(), argmax.data(), g, r0, r1, nullptr);
    cpu::max_pool_backward(din_cpu.data(), dout.data(), argmax_cpu.data(), g, r0, r1);
  }
  EXPECT_TRUE(same_bits("max_pool_backward", din_a, din_cpu));
  EXPECT_TRUE(bit_identical("max_pool_backward", din_a, din_b));
}

// Adaptive average pooling to a fixed output (the window's kernel, stride and pad unused).
TEST(CnnKernelsAdaptive, AveragePoolingIsTheCpuOp) {
  for (const auto& [h, w, oh, ow] : {std::array<int, 4>{5, 7, 3, 2}, {3, 3, 1, 1}, {1, 1, 7, 7}, {6, 4, 4, 3}}) {
    const CnnWindow g{2, h, w, 5, oh, ow, 1, 1, 0};
    SCOPED_TRACE(std::to_string(h) + "x" + std::to_string(w) + " -> " + std::to_string(oh) + "x" + std::to_string(ow));
    std::mt19937 rng(13);
    const std::int64_t rows = rows_of(g);
    const std::size_t out_n = static_cast<std::size_t>(rows) * g.c;
    const auto in = random_values<float>(rng, input_size(g));
    const auto din0 = random_values<float>(rng, input_size(g)), dout = random_values<float>(rng, out_n);
    Guarded<float> out(out_n), din_a(din0), din_b(din0);
    std::vector<float> out_cpu(out_n), din_cpu(din0);
    for (const auto& [r0, r1] : cut(rows, 2).list) {
      cuda::adaptive_avg_pool_forward(out.data(), in.data(), g, r0, r1, nullptr);
      cpu::adaptive_avg_pool_forward(out_cpu.data(), in.data(), g, r0, r1);
      cuda::adaptive_avg_pool_backward(din_a.data(), dout.data(), g, r0, r1, nullptr);
      cuda::adaptive_avg_pool_backward(din_b.data(), dout.data(), g, r0, r1, nullptr);
      cpu::adaptive_avg_pool_backward(din_cpu.data(), dout.data(), g, r0, r1);
    }
    EXPECT_TRUE(same_bits("adaptive_avg_pool_forward", out, out_cpu));
    EXPECT_TRUE(same_bits("adaptive_avg_pool_backward", din_a, din_cpu));
    EXPECT_TRUE(bit_identical("adaptive_avg_pool_backward", din_a, din_b));
  }
}

INSTANTIATE_TEST_SUITE_P(Windows, CnnKernels,
                         ::testing::Values(window(2, 9, 7, 3, 7, 2, 3),   // ResNet's stem, odd sides
                                           window(2, 5, 6, 4, 3, 2, 1),   // max pooling, a 3x3/2 conv
                                           window(1, 6, 5, 5, 3, 1, 1),   // a 3x3/1 conv
                                           window(2, 5, 5, 6, 1, 2, 0)),  // a 1x1/2 downsampling
                         [](const auto& info) {
                           const CnnWindow& g = info.param;
                           return "k" + std::to_string(g.kernel) + "s" + std::to_string(g.stride) + "p" +
                                  std::to_string(g.pad) + "_" + std::to_string(g.h) + "x" + std::to_string(g.w);
                         });

// Batch norm's phases in blocks, forward then backward, against the CPU op's sums and outputs.
TEST(CnnKernelsBatchNorm, PhasesInBlocksAreTheCpuOp) {
  const std::int64_t M = kSanitizer ? 29 : 203;
  const int C = 7;
  std::mt19937 rng(14);
  const auto x = random_values<float>(rng, M * C, 2.0f, 0.5f), w = random_values<float>(rng, C);
  const auto b = random_values<float>(rng, C), dy = random_values<float>(rng, M * C);
  const auto dx0 = random_values<float>(rng, M * C), dw0 = random_values<float>(rng, C);
  const auto db0 = random_values<float>(rng, C);
  struct Side {
    std::vector<float> y, dx, dw, db, mean, rstd, var;
    std::vector<double> sum_a, sum_b;
  };
  const auto run = [&](bool on_kernel) {
    Side s{std::vector<float>(M * C), dx0, dw0, db0, std::vector<float>(C), std::vector<float>(C),
           std::vector<float>(C), std::vector<double>(C, -1.0), std::vector<double>(C, -1.0)};
    BatchNormTensors t;
    t.x = x.data();
    t.y = s.y.data();
    t.dy = dy.data();
    t.dx = s.dx.data();
    t.weight = w.data();
    t.bias = b.data();
    t.dweight = s.dw.data();
    t.dbias = s.db.data();
    t.sum_a = s.sum_a.data();
    t.sum_b = s.sum_b.data();
    t.mean = s.mean.data();
    t.rstd = s.rstd.data();
    t.var_unbiased = s.var.data();
    t.rows = M;
    t.C = C;
    for (int phase = 0; phase < 3; ++phase)
      for (const auto& [r0, r1] : cut(M, 5).list) {
        if (on_kernel) cuda::batch_norm_forward(phase, t, r0, r1, nullptr);
        else cpu::batch_norm_forward(phase, t, r0, r1);
      }
    for (int phase = 0; phase < 2; ++phase)
      for (const auto& [r0, r1] : cut(M, 6).list) {
        if (on_kernel) cuda::batch_norm_backward(phase, t, r0, r1, nullptr);
        else cpu::batch_norm_backward(phase, t, r0, r1);
      }
    return s;
  };
  const Side kernel = run(true), again = run(true), cpu_side = run(false);
  const auto equal = [](const auto& a, const auto& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
  };
  EXPECT_TRUE(equal(kernel.y, cpu_side.y)) << "y";
  EXPECT_TRUE(equal(kernel.mean, cpu_side.mean) && equal(kernel.rstd, cpu_side.rstd) && equal(kernel.var, cpu_side.var))
      << "batch statistics";
  EXPECT_TRUE(equal(kernel.dx, cpu_side.dx)) << "dx";
  EXPECT_TRUE(equal(kernel.dw, cpu_side.dw) && equal(kernel.db, cpu_side.db)) << "dweight, dbias";
  EXPECT_TRUE(equal(kernel.dx, again.dx) && equal(kernel.y, again.y)) << "two runs differ";
}

}  // namespace
}  // namespace pipelane::cuda_test::cnn_kernels_test
