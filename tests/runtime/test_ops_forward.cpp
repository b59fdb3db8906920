// Forward pass of every fp32 CPU op against the double-precision reference (reference_ops.h) on
// fresh random inputs. Errors are normwise relative: max |op - ref| / max |ref| over the tensor.
//
// Tolerances: fp32 has a unit roundoff of 6e-8. An op whose outputs are a sum of K rounded terms
// in fp32 is off by about sqrt(K)..K units of roundoff relative to the largest term; with K <= 64
// here and O(1) inputs the worst case is 64 * 6e-8 ~ 4e-6 (typical: 1e-7), so reductions
// (layernorm, matmul, attention, logits, cross-entropy) are held to 5e-6, ops with a single
// correctly rounded operation per element to 5e-7, and GeLU (its tanh: a few ulp) to 1e-6.
// A formula bug (wrong scale, wrong layout, missing term) gives errors of order 1e-2..1.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <ostream>
#include <random>
#include <vector>

#include "runtime/cpu/cpu_ops.h"
#include "tests/runtime/reference_ops.h"

namespace pipelane {
namespace {

using ref::rel_error;
using ref::to_double;

struct Shape {
  int B, T, C, NH;
  int threads;  // OpenMP/OpenBLAS threads the case runs with
  const char* name;
};

void PrintTo(const Shape& s, std::ostream* os) {
  *os << s.name << " (B=" << s.B << " T=" << s.T << " C=" << s.C << " NH=" << s.NH
      << ", " << s.threads << " threads)";
}

// Small; not a multiple of 16 in T, C and N; and enough rows (256) for several threads' share.
const Shape kShapes[] = {
    {2, 4, 16, 2, 2, "small"},
    {3, 7, 36, 3, 2, "odd"},
    {4, 64, 32, 4, 4, "many_rows"},
};

class OpsForward : public ::testing::TestWithParam<Shape> {
 protected:
  void SetUp() override { threads_ = std::make_unique<ref::ScopedThreads>(GetParam().threads); }
  void TearDown() override { threads_.reset(); }
  std::mt19937 rng{1234u + static_cast<unsigned>(GetParam().C * 31 + GetParam().T)};
  std::unique_ptr<ref::ScopedThreads> threads_;
};

TEST_P(OpsForward, Embedding) {
  const auto [B, T, C, NH, th, nm] = GetParam();
  const int V = 11;
  std::uniform_int_distribution<int> tok(0, V - 1);
  std::vector<std::int32_t> tokens(B * T);
  for (auto& t : tokens) t = tok(rng);
  tokens[0] = V - 1;  // the last row of wte is used too
  const auto wte = ref::random_floats(rng, V * C), wpe = ref::random_floats(rng, T * C);
  std::vector<float> out(B * T * C, NAN);
  cpu::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  // One fp32 addition per element: correctly rounded, so within 1 ulp (6e-8) of the exact sum.
  EXPECT_LT(rel_error(out, ref::embedding(tokens, to_double(wte), to_double(wpe), B, T, C)), 5e-7);
}

TEST_P(OpsForward, Layernorm) {
  const auto [B, T, C, NH, th, nm] = GetParam();
  const int N = B * T;
  // Inputs with a non-zero mean and non-unit scale, as a residual stream has.
  auto inp = ref::random_floats(rng, N * C, 2.0f);
  for (float& x : inp) x += 0.75f;
  const auto w = ref::random_floats(rng, C), b = ref::random_floats(rng, C);
  std::vector<float> out(N * C, NAN), mean(N, NAN), rstd(N, NAN);
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  ref::Vec rmean, rrstd;
  const auto want = ref::layernorm(to_double(inp), to_double(w), to_double(b), N, C, &rmean, &rrstd);
  // Two fp32 reductions over C <= 64 terms, then a few roundings per element.
  EXPECT_LT(rel_error(out, want), 5e-6);
  EXPECT_LT(rel_error(mean, rmean), 5e-6);
  EXPECT_LT(rel_error(rstd, rrstd), 5e-6);
}

// Rows with a variance comparable to eps, where eps = 1e-5 changes the result by a few percent
// (with the O(1) variances above it would be below fp32 resolution).
TEST_P(OpsForward, LayernormSmallVarianceRowsUseEps1e5) {
  const auto [B, T, C, NH, th, nm] = GetParam();
  const int N = B * T;
  auto inp = ref::random_floats(rng, N * C, 3e-3f);
  for (float& x : inp) x += 1.0f / 3.0f;
  const auto w = ref::random_floats(rng, C), b = ref::random_floats(rng, C);
  std::vector<float> out(N * C, NAN), mean(N, NAN), rstd(N, NAN);
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  ref::Vec rmean, rrstd;
  const auto want = ref::layernorm(to_double(inp), to_double(w), to_double(b), N, C, &rmean, &rrstd);
  // Centering x ~ 0.33 + 3e-3 noise in fp32 loses ~log2(0.33/3e-3) ~ 7 bits: ~1e-5 relative.
  EXPECT_LT(rel_error(out, want), 1e-4);
  EXPECT_LT(rel_error(rstd, rrstd), 1e-4);
  // The same reference with eps = 0 is far off: the test can tell eps apart.
  double var0 = 0.0;
  for (int c = 0; c < C; ++c) var0 += (inp[c] - rmean[0]) * (inp[c] - rmean[0]);
  var0 /= C;
  EXPECT_GT(std::abs(1.0 / std::sqrt(var0) - rrstd[0]) / rrstd[0], 1e-2);
}

TEST_P(OpsForward, MatmulWithBias) {
  const auto [B, T, C, NH, th, nm] = GetParam();
  const int N = B * T, OC = 3 * C + 5;  // OC never a multiple of 16
  const auto inp = ref::random_floats(rng, N * C), w = ref::random_floats(rng, OC * C);
  const auto bias = ref::random_floats(rng, OC, 3.0f);
  std::vector<float> out(N * OC, NAN);  // garbage in out must not leak into the result
  cpu::matmul_forward(out.data(), inp.data(), w.data(), bias.data(), N, C, OC);
  // Dot products of C <= 64 fp32 terms in sgemm.
  EXPECT_LT(rel_error(out, ref::matmul(to_double(inp), to_double(w), to_double(bias), N, C, OC)),
            5e-6);
}

TEST_P(OpsForward, MatmulWithoutBias) {
  const auto [B, T, C, NH, th, nm] = GetParam();
  const int N = B * T, OC = 2 * C + 3;
  const auto inp = ref::random_floats(rng, N * C), w = ref::random_floats(rng, OC * C);
  std::vector<float> out(N * OC, NAN);
  cpu::matmul_forward(out.data(), inp.data(), w.data(), nullptr, N, C, OC);
  EXPECT_LT(rel_error(out, ref::matmul(to_double(inp), to_double(w), {}, N, C, OC)), 5e-6);
}

TEST_P(OpsForward, Attention) {
  const auto [B, T, C, NH, th, nm] = GetParam();
  const auto qkv = ref::random_floats(rng, B * T * 3 * C);
  std::vector<float> out(B * T * C, NAN), att(B * NH * T * T, NAN);
  cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  ref::Vec ratt;
  const auto want = ref::attention(to_double(qkv), B, T, C, NH, &ratt);
  // Scores are hs-term dot products, the softmax sums <= T terms, the output sums <= T terms.
  EXPECT_LT(rel_error(out, want), 5e-6);
  EXPECT_LT(rel_error(att, ratt), 5e-6);
  // Causality: probabilities above the diagonal are exactly zero, each row sums to one.
  for (int bh = 0; bh < B * NH; ++bh)
    for (int i = 0; i < T; ++i) {
      double s = 0.0;
      for (int j = 0; j < T; ++j) {
        const float p = att[(static_cast<std::size_t>(bh) * T + i) * T + j];
        if (j > i) {
          ASSERT_EQ(p, 0.0f) << "bh=" << bh << " i=" << i << " j=" << j;
        }
        s += p;
      }
      ASSERT_NEAR(s, 1.0, 1e-5);
    }
}

TEST_P(OpsForward, Gelu) {
  const auto [B, T, C, NH, th, nm] = GetParam();
  const std::size_t n = static_cast<std::size_t>(B) * T * C * 4 + 3;  // odd length: simd tail
  const auto x = ref::random_floats(rng, n, 3.0f);
  std::vector<float> out(n, NAN);
  cpu::gelu_forward(out.data(), x.data(), n);
  // A handful of roundings plus a tanh good to a few ulp: ~1e-7 relative to max |out| ~ 10.
  EXPECT_LT(rel_error(out, ref::gelu(to_double(x))), 1e-6);
}

TEST_P(OpsForward, AddAndScale) {
  const auto [B, T, C, NH, th, nm] = GetParam();
  const std::size_t n = static_cast<std::size_t>(B) * T * C + 5;
  const auto a = ref::random_floats(rng, n), b = ref::random_floats(rng, n);
  std::vector<float> out(n, NAN);
  cpu::add_forward(out.data(), a.data(), b.data(), n);
  ref::Vec want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = static_cast<double>(a[i]) + b[i];
  EXPECT_LT(rel_error(out, want), 5e-7);  // one correctly rounded addition

  std::vector<float> acc = a;
  cpu::add_inplace(acc.data(), b.data(), n);
  EXPECT_EQ(acc, out);  // the same rounded sums, bit for bit

  cpu::scale_inplace(acc.data(), -0.3f, n);  // one rounded multiplication
  for (std::size_t i = 0; i < n; ++i) want[i] = static_cast<double>(out[i]) * static_cast<double>(-0.3f);
  EXPECT_LT(rel_error(acc, want), 5e-7);
}

TEST_P(OpsForward, LmHeadLogits) {
  const auto [B, T, C, NH, th, nm] = GetParam();
  const int N = B * T, Vp = 48;
  const auto x = ref::random_floats(rng, N * C), wte = ref::random_floats(rng, Vp * C);
  std::vector<float> logits(N * Vp, NAN);
  cpu::lm_head_logits(logits.data(), x.data(), wte.data(), N, C, Vp);
  // C-term fp32 dot products.
  EXPECT_LT(rel_error(logits, ref::lm_head_logits(to_double(x), to_double(wte), N, C, Vp)), 5e-6);
}

TEST_P(OpsForward, CrossEntropyLosses) {
  const auto [B, T, C, NH, th, nm] = GetParam();
  const int N = B * T, V = 37, Vp = 48;
  const auto x = ref::random_floats(rng, N * C, 0.5f);
  auto wte = ref::random_floats(rng, Vp * C, 0.5f);
  // Padding rows that would dominate every softmax if they were (wrongly) included.
  for (int v = V; v < Vp; ++v)
    for (int c = 0; c < C; ++c) wte[v * C + c] = 4.0f * (x[c] >= 0 ? 1.0f : -1.0f);
  std::uniform_int_distribution<int> tgt(0, V - 1);
  std::vector<std::int32_t> targets(N);
  for (auto& t : targets) t = tgt(rng);
  targets[0] = V - 1;
  targets[N - 1] = 0;
  std::vector<float> losses(N, NAN), scratch(cpu::lm_head_chunk_rows(N, Vp) * Vp);
  const double total = cpu::lm_head_cross_entropy(losses.data(), nullptr, nullptr, x.data(),
                                                   wte.data(), targets.data(), N, C, V, Vp,
                                                   1.0f, scratch.data());
  const auto want = ref::cross_entropy(to_double(x), to_double(wte), targets, N, C, V, Vp);
  // Logits are C-term dot products; log-sum-exp over V terms in fp32. Losses are O(log V) = 3.6.
  EXPECT_LT(rel_error(losses, want), 5e-6);
  double sum = 0.0;
  for (float l : losses) sum += l;
  EXPECT_DOUBLE_EQ(total, sum);  // the returned total is the double sum of the losses written
}

INSTANTIATE_TEST_SUITE_P(Shapes, OpsForward, ::testing::ValuesIn(kShapes),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(OpsForwardReductions, SumSquaresAgainstDoubleSum) {
  std::mt19937 rng(77);
  // One block (serial path) and several 65536-element blocks with a ragged tail.
  for (std::size_t n : {std::size_t{1000}, std::size_t{3} * 65536 + 123}) {
    const auto x = ref::random_floats(rng, n);
    double want = 0.0;
    for (float v : x) want += static_cast<double>(v) * v;
    // float*float is exact in double; the only error is double summation, ~n * 1e-16.
    EXPECT_NEAR(cpu::sum_squares(x.data(), n), want, 1e-12 * want) << "n=" << n;
  }
}

}  // namespace
}  // namespace pipelane
