// Emulated layernorm kernels against the double reference and the CPU op, fp32 and bf16.
// fp32 NMSE limits: forward 1e-12 (a sum over C then ~5 roundings per element: errors of a few
// ulp, NMSE ~ (4 * 6e-8)^2 = 6e-14, with margin); backward 1e-11 (two sums over C per row, and
// column sums over N rows for dweight/dbias whose relative error grows like sqrt(N) ulps).
// Against the CPU op the limit is 4x (both sides' errors add: (sqrt(a) + sqrt(b))^2 <= 4 max).
#include <gtest/gtest.h>

#include "runtime/cuda/kernels/layernorm.cuh"
#include "tests/cuda/kernel_check.h"
#include "tests/cuda/reference.h"
#include "tests/runtime/reference_ops.h"
#if !PIPELANE_CUDA_TEST_SANITIZER
#include "runtime/cpu/cpu_ops.h"
#endif

// A namespace of its own: the emulated test executables are unity builds.
namespace pipelane::cuda_test::layernorm_test {
namespace {

constexpr double kForwardNmse = 1e-12;
constexpr double kBackwardNmse = 1e-11;

struct Shape {
  int N, C;
};
// C not a multiple of 32, a single row, several blocks of rows, a long row.
std::vector<Shape> shapes() {
  if (kSanitizer) return {{3, 37}, {1, 33}};
  return {{7, 77}, {1, 33}, {70, 64}, {9, 300}};
}

template <typename T>
class Layernorm : public ::testing::Test {};
TYPED_TEST_SUITE(Layernorm, StorageTypes);

TYPED_TEST(Layernorm, Forward) {
  using T = TypeParam;
  for (const auto [N, C] : shapes()) {
    SCOPED_TRACE(::testing::Message() << type_name<T>() << " N=" << N << " C=" << C);
    std::mt19937 rng(1000u * N + C);
    const auto x = random_values<T>(rng, static_cast<std::size_t>(N) * C, 2.0f, 0.5f);
    const auto w = random_values<T>(rng, C, 0.2f, 1.0f);
    const auto b = random_values<T>(rng, C, 0.2f);
    struct Out {
      Guarded<T> out;
      Guarded<float> mean, rstd;
    };
    const auto run = [&] {
      Out o{Guarded<T>(x.size()), Guarded<float>(N), Guarded<float>(N)};
      Guarded<T> gx(x), gw(w), gb(b);
      cuda::layernorm_forward(o.out.data(), o.mean.data(), o.rstd.data(), gx.data(), gw.data(),
                              gb.data(), N, C, nullptr);
      EXPECT_TRUE(intact("inp", gx));
      return o;
    };
    const Out o = run(), again = run();
    Vec mean, rstd;
    const Vec want = ref::layernorm(to_double(x), to_double(w), to_double(b), N, C, &mean, &rstd);
    EXPECT_TRUE(matches("out", o.out, want, kForwardNmse));
    EXPECT_TRUE(matches("mean", o.mean, mean, kForwardNmse));
    EXPECT_TRUE(matches("rstd", o.rstd, rstd, kForwardNmse));
    EXPECT_TRUE(bit_identical("out", o.out, again.out));
    EXPECT_TRUE(bit_identical("rstd", o.rstd, again.rstd));
#if !PIPELANE_CUDA_TEST_SANITIZER
    std::vector<float> cout(x.size()), cmean(N), crstd(N);
    cpu::layernorm_forward(cout.data(), cmean.data(), crstd.data(), to_floats(x).data(),
                           to_floats(w).data(), to_floats(b).data(), N, C);
    EXPECT_TRUE(matches("out vs cpu", o.out, cout, 4 * kForwardNmse));
    EXPECT_TRUE(matches("rstd vs cpu", o.rstd, crstd, 4 * kForwardNmse));
#endif
  }
}

TYPED_TEST(Layernorm, Backward) {
  using T = TypeParam;
  for (const auto [N, C] : shapes()) {
    SCOPED_TRACE(::testing::Message() << type_name<T>() << " N=" << N << " C=" << C);
    std::mt19937 rng(2000u * N + C);
    const std::size_t NC = static_cast<std::size_t>(N) * C;
    const auto x = random_values<T>(rng, NC, 2.0f, 0.5f);
    const auto w = random_values<T>(rng, C, 0.2f, 1.0f);
    const auto dout = random_values<T>(rng, NC);
    const auto dinp0 = random_values<T>(rng, NC);  // accumulated into
    const auto dw0 = random_values<float>(rng, C), db0 = random_values<float>(rng, C);
    // mean and rstd as the forward would leave them (the double ones, rounded to float).
    Vec mean_d, rstd_d;
    ref::layernorm(to_double(x), to_double(w), Vec(C, 0.0), N, C, &mean_d, &rstd_d);
    std::vector<float> mean(mean_d.begin(), mean_d.end()), rstd(rstd_d.begin(), rstd_d.end());
    struct Out {
      Guarded<T> dinp;
      Guarded<float> dw, db;
    };
    // whole: layernorm_backward; otherwise its two halves.
    const auto run = [&](bool whole) {
      Out o{Guarded<T>(dinp0), Guarded<float>(dw0), Guarded<float>(db0)};
      Guarded<T> gx(x), gw(w), gd(dout);
      Guarded<float> gm(mean), gr(rstd), scratch(cuda::layernorm_backward_scratch_floats(N, C));
      if (whole) {
        cuda::layernorm_backward(o.dinp.data(), o.dw.data(), o.db.data(), gd.data(), gx.data(),
                                 gw.data(), gm.data(), gr.data(), N, C, scratch.data(), nullptr);
      } else {
        cuda::layernorm_backward_input(o.dinp.data(), gd.data(), gx.data(), gw.data(), gm.data(),
                                       gr.data(), N, C, nullptr);
        cuda::layernorm_backward_params(o.dw.data(), o.db.data(), gd.data(), gx.data(), gm.data(),
                                        gr.data(), N, C, scratch.data(), nullptr);
      }
      EXPECT_TRUE(intact("scratch", scratch));
      return o;
    };
    const Out o = run(true), halves = run(false);
    Vec dw = to_double(dw0), db = to_double(db0);
    const Vec dinc = ref2::layernorm_backward(to_double(dout), to_double(x), to_double(w),
                                              to_double(mean), to_double(rstd), N, C, dw, db);
    Vec dinp = to_double(dinp0);
    for (std::size_t i = 0; i < NC; ++i) dinp[i] += dinc[i];
    EXPECT_TRUE(matches("dinp", o.dinp, dinp, kBackwardNmse));
    EXPECT_TRUE(matches("dweight", o.dw, dw, kBackwardNmse));
    EXPECT_TRUE(matches("dbias", o.db, db, kBackwardNmse));
    EXPECT_TRUE(bit_identical("dinp", o.dinp, halves.dinp));
    EXPECT_TRUE(bit_identical("dweight", o.dw, halves.dw));
    EXPECT_TRUE(bit_identical("dbias", o.db, halves.db));
#if !PIPELANE_CUDA_TEST_SANITIZER
    auto cdinp = to_floats(dinp0);
    auto cdw = dw0, cdb = db0;
    cpu::layernorm_backward(cdinp.data(), cdw.data(), cdb.data(), to_floats(dout).data(),
                            to_floats(x).data(), to_floats(w).data(), mean.data(), rstd.data(), N,
                            C);
    EXPECT_TRUE(matches("dinp vs cpu", o.dinp, cdinp, 4 * kBackwardNmse));
    EXPECT_TRUE(matches("dweight vs cpu", o.dw, cdw, 4 * kBackwardNmse));
    EXPECT_TRUE(matches("dbias vs cpu", o.db, cdb, 4 * kBackwardNmse));
#endif
  }
}

}  // namespace
}  // namespace pipelane::cuda_test::layernorm_test
