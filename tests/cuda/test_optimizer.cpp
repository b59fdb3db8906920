// Emulated AdamW and sum of squares against the double reference and the CPU ops.
// AdamW (fp32 master weights): ~10 roundings per element (a sqrt and two divisions among them),
// NMSE of the moments and weights ~ (10 * 6e-8)^2: limit 1e-12; its bf16 copy is the fp32 result
// rounded (bf16 tolerance). Sum of squares in double: relative error <= n * 2^-53 ~ 1e-11 for the
// sizes here, typically sqrt(n) * 2^-53: NMSE limit 1e-20.
#include <gtest/gtest.h>

#include "runtime/cuda/kernels/optimizer.cuh"
#include "tests/cuda/kernel_check.h"
#include "tests/runtime/reference_ops.h"
#if !PIPELANE_CUDA_TEST_SANITIZER
#include "runtime/cpu/cpu_ops.h"
#endif

// A namespace of its own: the emulated test executables are unity builds.
namespace pipelane::cuda_test::optimizer_test {
namespace {

constexpr double kAdamWNmse = 1e-12;
constexpr double kSquaresNmse = 1e-20;

TEST(AdamW, MatchesReferenceAndCpu) {
  const std::vector<std::size_t> sizes =
      kSanitizer ? std::vector<std::size_t>{300} : std::vector<std::size_t>{1, 1003, 70001};
  for (const std::size_t n : sizes) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    std::mt19937 rng(static_cast<unsigned>(n));
    const auto p0 = random_values<float>(rng, n), g = random_values<float>(rng, n, 0.1f);
    const auto m0 = random_values<float>(rng, n, 0.01f);
    auto v0 = random_values<float>(rng, n, 0.001f);
    for (float& x : v0) x = x * x;  // second moments are non-negative
    const AdamWParams h{3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 7};
    const float grad_scale = 0.8f;
    struct Out {
      Guarded<float> p, m, v;
      Guarded<bf16> copy;
    };
    const auto run = [&](bool with_copy) {
      Out o{Guarded<float>(p0), Guarded<float>(m0), Guarded<float>(v0), Guarded<bf16>(n)};
      Guarded<float> gg(g);
      if (with_copy)
        cuda::adamw_update(o.p.data(), gg.data(), o.m.data(), o.v.data(), n, h, grad_scale,
                           o.copy.data(), nullptr);
      else
        cuda::adamw_update(o.p.data(), gg.data(), o.m.data(), o.v.data(), n, h, grad_scale,
                           nullptr);
      return o;
    };
    const Out o = run(true), plain = run(false);
    Vec p = to_double(p0), m = to_double(m0), v = to_double(v0);
    ref::adamw_step(p, to_double(g), m, v,
                    ref::AdamW{h.lr, h.beta1, h.beta2, h.eps, h.weight_decay}, h.t, grad_scale);
    EXPECT_TRUE(matches("param", o.p, p, kAdamWNmse));
    EXPECT_TRUE(matches("m", o.m, m, kAdamWNmse));
    EXPECT_TRUE(matches("v", o.v, v, kAdamWNmse));
    EXPECT_TRUE(matches("bf16 copy", o.copy, p, kAdamWNmse));
    EXPECT_TRUE(bit_identical("param with/without copy", o.p, plain.p));
#if !PIPELANE_CUDA_TEST_SANITIZER
    auto cp = p0, cm = m0, cv = v0;
    cpu::adamw_update(cp.data(), g.data(), cm.data(), cv.data(), n, h, grad_scale);
    EXPECT_TRUE(matches("param vs cpu", o.p, cp, 4 * kAdamWNmse));
    EXPECT_TRUE(matches("v vs cpu", o.v, cv, 4 * kAdamWNmse));
#endif
  }
}

template <typename T>
class SumSquares : public ::testing::Test {};
TYPED_TEST_SUITE(SumSquares, StorageTypes);

// Empty, one element, less than a chunk, several chunks (65536 elements each) with a partial one.
TYPED_TEST(SumSquares, MatchesReferenceAndCpu) {
  using T = TypeParam;
  const std::vector<std::size_t> sizes = kSanitizer ? std::vector<std::size_t>{0, 300, 70001}
                                                    : std::vector<std::size_t>{0, 1, 1003, 200001};
  for (const std::size_t n : sizes) {
    SCOPED_TRACE(::testing::Message() << type_name<T>() << " n=" << n);
    std::mt19937 rng(static_cast<unsigned>(n) + 3);
    const auto x = random_values<T>(rng, n);
    const auto run = [&] {
      Guarded<double> result(1), scratch(cuda::sum_squares_scratch_doubles(n));
      Guarded<T> gx(x);
      cuda::sum_squares(result.data(), gx.data(), n, scratch.data(), nullptr);
      EXPECT_TRUE(intact("scratch", scratch));
      return result;
    };
    const Guarded<double> r = run(), again = run();
    double want = 0.0;
    for (const T& xi : x) want += static_cast<double>(to_float(xi)) * to_float(xi);
    EXPECT_TRUE(matches("sum of squares", r, Vec{want}, kSquaresNmse));
    EXPECT_TRUE(bit_identical("sum of squares", r, again));
#if !PIPELANE_CUDA_TEST_SANITIZER
    EXPECT_TRUE(matches("vs cpu", r, Vec{cpu::sum_squares(to_floats(x).data(), n)}, kSquaresNmse));
#endif
  }
}

}  // namespace
}  // namespace pipelane::cuda_test::optimizer_test
