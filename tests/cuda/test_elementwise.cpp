// Emulated elementwise kernels (GeLU, adds, scale, bias) and the bias gradient against the double
// reference and the CPU op, fp32 and bf16, with +-Inf and NaN among the inputs (they must come out
// where the reference has them).
// fp32 NMSE limits: one correctly rounded operation per element (adds, scale, bias) -> every
// element within 2^-24 relative, NMSE <= 2^-48 = 3.6e-15: limit 1e-14. GeLU: tanhf's few ulp and
// ~10 roundings, NMSE ~ (10 * 6e-8)^2 = 3.6e-13: limit 1e-12. Bias gradient: column sums over N
// rows in fixed chunks: limit 1e-11 (as layernorm's parameter gradients).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/cuda/kernels/elementwise.cuh"
#include "tests/cuda/kernel_check.h"
#include "tests/cuda/reference.h"
#include "tests/runtime/reference_ops.h"
#include "runtime/cpu/bf16_round.h"
#if !PIPELANE_CUDA_TEST_SANITIZER
#include "runtime/cpu/cpu_ops.h"
#endif

// A namespace of its own: the emulated test executables are unity builds.
namespace pipelane::cuda_test::elementwise_test {
namespace {

constexpr double kOneRoundingNmse = 1e-14;
constexpr double kGeluNmse = 1e-12;
constexpr double kColumnSumNmse = 1e-11;

std::vector<std::size_t> sizes() {
  if (kSanitizer) return {1, 300};
  return {1, 7, 1000 + 3, 70001};
}

// Inputs with +Inf, -Inf and NaN in front when there is room.
template <typename T>
std::vector<T> with_nonfinite(std::vector<T> v) {
  const float special[] = {std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN()};
  for (std::size_t i = 0; i < 3 && i + 4 < v.size(); ++i) v[i] = from_float<T>(special[i]);
  return v;
}

template <typename T>
class Elementwise : public ::testing::Test {};
TYPED_TEST_SUITE(Elementwise, StorageTypes);

TYPED_TEST(Elementwise, Gelu) {
  using T = TypeParam;
  for (const std::size_t n : sizes()) {
    SCOPED_TRACE(::testing::Message() << type_name<T>() << " n=" << n);
    std::mt19937 rng(static_cast<unsigned>(n));
    const auto x = with_nonfinite(random_values<T>(rng, n, 2.0f));
    const auto dout = random_values<T>(rng, n);
    const auto run = [&] {
      std::pair<Guarded<T>, Guarded<T>> o{Guarded<T>(n), Guarded<T>(n)};
      Guarded<T> gx(x), gd(dout);
      cuda::gelu_forward(o.first.data(), gx.data(), n, nullptr);
      cuda::gelu_backward(o.second.data(), gx.data(), gd.data(), n, nullptr);
      return o;
    };
    const auto o = run(), again = run();
    EXPECT_TRUE(matches("gelu", o.first, ref::gelu(to_double(x)), kGeluNmse));
    EXPECT_TRUE(
        matches("dgelu", o.second, ref2::gelu_backward(to_double(x), to_double(dout)), kGeluNmse));
    EXPECT_TRUE(bit_identical("gelu", o.first, again.first));
    EXPECT_TRUE(bit_identical("dgelu", o.second, again.second));
#if !PIPELANE_CUDA_TEST_SANITIZER
    std::vector<float> c(n), dc(n);
    cpu::gelu_forward(c.data(), to_floats(x).data(), n);
    cpu::gelu_backward(dc.data(), to_floats(x).data(), to_floats(dout).data(), n);
    EXPECT_TRUE(matches("gelu vs cpu", o.first, c, 4 * kGeluNmse));
    EXPECT_TRUE(matches("dgelu vs cpu", o.second, dc, 4 * kGeluNmse));
#endif
  }
}

TYPED_TEST(Elementwise, AddScaleBias) {
  using T = TypeParam;
  for (const std::size_t n : sizes()) {
    SCOPED_TRACE(::testing::Message() << type_name<T>() << " n=" << n);
    std::mt19937 rng(static_cast<unsigned>(n) + 7);
    const auto a = with_nonfinite(random_values<T>(rng, n)), b = random_values<T>(rng, n);
    const int C = n % 37 == 0 ? 37 : (n > 37 ? 37 : static_cast<int>(n));  // odd channel count
    const int N = static_cast<int>(n / C);
    const auto bias = random_values<T>(rng, C);
    const float s = 0.37f;
    struct Out {
      Guarded<T> sum, acc, scaled, biased;
    };
    const auto run = [&] {
      Out o{Guarded<T>(n), Guarded<T>(a), Guarded<T>(a), Guarded<T>(a)};
      Guarded<T> ga(a), gb(b), gbias(bias);
      cuda::add_forward(o.sum.data(), ga.data(), gb.data(), n, nullptr);
      cuda::add_inplace(o.acc.data(), gb.data(), n, nullptr);
      cuda::scale_inplace(o.scaled.data(), s, n, nullptr);
      cuda::add_bias(o.biased.data(), gbias.data(), N, C, nullptr);  // the first N*C elements
      return o;
    };
    const Out o = run(), again = run();
    const Vec da = to_double(a), db = to_double(b), dbias = to_double(bias);
    Vec sum(n), scaled(n), biased = da;
    for (std::size_t i = 0; i < n; ++i) {
      sum[i] = da[i] + db[i];
      scaled[i] = da[i] * static_cast<double>(s);
    }
    for (std::size_t i = 0; i < static_cast<std::size_t>(N) * C; ++i) biased[i] += dbias[i % C];
    EXPECT_TRUE(matches("add", o.sum, sum, kOneRoundingNmse));
    EXPECT_TRUE(matches("add_inplace", o.acc, sum, kOneRoundingNmse));
    EXPECT_TRUE(matches("scale", o.scaled, scaled, kOneRoundingNmse));
    EXPECT_TRUE(matches("add_bias", o.biased, biased, kOneRoundingNmse));
    EXPECT_TRUE(bit_identical("add", o.sum, again.sum));
    EXPECT_TRUE(bit_identical("add_bias", o.biased, again.biased));
#if !PIPELANE_CUDA_TEST_SANITIZER
    auto c = to_floats(a), cs = to_floats(a);
    std::vector<float> csum(n);
    cpu::add_forward(csum.data(), to_floats(a).data(), to_floats(b).data(), n);
    cpu::add_inplace(c.data(), to_floats(b).data(), n);
    cpu::scale_inplace(cs.data(), s, n);
    EXPECT_TRUE(matches("add vs cpu", o.sum, csum, 4 * kOneRoundingNmse));
    EXPECT_TRUE(matches("add_inplace vs cpu", o.acc, c, 4 * kOneRoundingNmse));
    EXPECT_TRUE(matches("scale vs cpu", o.scaled, cs, 4 * kOneRoundingNmse));
#endif
  }
}

TYPED_TEST(Elementwise, BiasGradient) {
  using T = TypeParam;
  struct Shape {
    int N, OC;
  };
  const std::vector<Shape> shapes =
      kSanitizer ? std::vector<Shape>{{5, 37}} : std::vector<Shape>{{1, 1}, {5, 37}, {70, 200}};
  for (const auto [N, OC] : shapes) {
    SCOPED_TRACE(::testing::Message() << type_name<T>() << " N=" << N << " OC=" << OC);
    std::mt19937 rng(31u * N + OC);
    const auto dout = random_values<T>(rng, static_cast<std::size_t>(N) * OC);
    const auto db0 = random_values<float>(rng, OC);
    const auto run = [&] {
      Guarded<float> db(db0), scratch(cuda::matmul_backward_bias_scratch_floats(N, OC));
      Guarded<T> gd(dout);
      cuda::matmul_backward_bias(db.data(), gd.data(), N, OC, scratch.data(), nullptr);
      EXPECT_TRUE(intact("scratch", scratch));
      return db;
    };
    const Guarded<float> db = run(), again = run();
    Vec want = to_double(db0);
    ref2::add_column_sums(want, to_double(dout), N, OC);
    EXPECT_TRUE(matches("dbias", db, want, kColumnSumNmse));
    EXPECT_TRUE(bit_identical("dbias", db, again));
#if !PIPELANE_CUDA_TEST_SANITIZER
    // The CPU op's bias gradient comes with its sgemms: run it with a zero input.
    auto cdb = db0;
    std::vector<float> cdw(OC), zeros(static_cast<std::size_t>(N) + OC);
    cpu::matmul_backward(nullptr, cdw.data(), cdb.data(), to_floats(dout).data(), zeros.data(),
                         zeros.data(), N, 1, OC);
    EXPECT_TRUE(matches("dbias vs cpu", db, cdb, 4 * kColumnSumNmse));
#endif
  }
}

// The conversions around bf16 GEMM operands and cuDNN graphs: fp32 -> bf16 is the CPU's bf16
// rounding (nearest even) bit for bit, bf16 -> fp32 is exact; non-finite values survive both.
TEST(ElementwiseConversions, Bf16RoundingIsTheCpusAndWideningIsExact) {
  for (const std::size_t n : sizes()) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    std::mt19937 rng(static_cast<unsigned>(n) + 11);
    const std::vector<float> x = with_nonfinite(random_values<float>(rng, n, 3.0f));
    Guarded<float> gx(x), widened(n);
    Guarded<bf16> narrowed(n);
    cuda::convert_from_float<bf16>(narrowed.data(), gx.data(), n, nullptr);
    cuda::convert_to_float<bf16>(widened.data(), narrowed.data(), n, nullptr);
    EXPECT_TRUE(intact("narrowed", narrowed));
    EXPECT_TRUE(intact("widened", widened));
    int wrong = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const float want = cpu::round_to_bf16(x[i]), got = widened.data()[i];
      const bool both_nan = std::isnan(want) && std::isnan(got);
      wrong += !both_nan && std::memcmp(&want, &got, sizeof(float)) != 0;
    }
    EXPECT_EQ(wrong, 0) << "elements not rounded to bf16 as the CPU rounds them";
  }
}

}  // namespace
}  // namespace pipelane::cuda_test::elementwise_test
