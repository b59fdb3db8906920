// Backward pass of every fp32 CPU op against central finite differences of the double reference
// (reference_ops.h), with loss = sum(R * out) for a random R (so dout = R), plus the gradient
// conventions of runtime/ops.h, the fused LM head + cross-entropy (chunked and not), AdamW, and
// determinism across runs and thread counts.
//
// Tolerance: the finite-difference truth is computed in double with eps = 1e-6, so its error is
// O(eps^2) truncation + O(1e-16 / eps) cancellation, ~1e-9 relative: it is exact as far as an
// fp32 op can tell. The fp32 backward kernels make O(1e-7)..O(1e-6) normwise relative error (sums
// of <= 40 rounded terms, observed <= 7e-7), so the comparison is held to kGradTol = 1e-4: 100x
// headroom over fp32 rounding, while a wrong formula, a missing term or a wrong index gives errors
// of 1e-2 or more. Errors are normwise: max |op - truth| / max |truth| over the tensor.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "runtime/cpu/cpu_ops.h"
#include "tests/runtime/reference_ops.h"

namespace pipelane {
namespace {

using ref::rel_error;
using ref::to_double;
using ref::Vec;

constexpr double kGradTol = 1e-4;
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// Error of an accumulated (+=) gradient: (got - prefill), in double, against the truth.
double accumulated_error(const std::vector<float>& got, const std::vector<float>& prefill,
                         const Vec& truth) {
  double maxdiff = 0.0, maxref = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs((static_cast<double>(got[i]) - prefill[i]) - truth[i]);
    if (!std::isfinite(d)) return std::numeric_limits<double>::infinity();
    maxdiff = std::max(maxdiff, d);
    maxref = std::max(maxref, std::abs(truth[i]));
  }
  return maxref > 0 ? maxdiff / maxref : maxdiff;
}

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ------------------------------------------------------------------------------------ embedding

TEST(OpsBackward, EmbeddingAccumulatesIntoWteAndWpe) {
  ref::ScopedThreads threads(2);
  std::mt19937 rng(11);
  const int B = 2, T = 5, C = 37, V = 7;
  const std::vector<std::int32_t> tokens = {3, 1, 3, 3, 5, 1, 0, 5, 3, 1};  // repeats; 2, 4, 6 unused
  const auto wte = ref::random_floats(rng, V * C), wpe = ref::random_floats(rng, T * C);
  const auto R = ref::random_floats(rng, B * T * C);
  const auto pre_wte = ref::random_floats(rng, V * C), pre_wpe = ref::random_floats(rng, T * C);
  auto dwte = pre_wte, dwpe = pre_wpe;
  cpu::embedding_backward(dwte.data(), dwpe.data(), R.data(), tokens.data(), B, T, C);

  const Vec wte_d = to_double(wte), wpe_d = to_double(wpe), Rd = to_double(R);
  const Vec g_wte = ref::fd_gradient(
      [&](const Vec& w) { return ref::embedding(tokens, w, wpe_d, B, T, C); }, wte_d, Rd);
  const Vec g_wpe = ref::fd_gradient(
      [&](const Vec& p) { return ref::embedding(tokens, wte_d, p, B, T, C); }, wpe_d, Rd);
  EXPECT_LT(accumulated_error(dwte, pre_wte, g_wte), kGradTol);
  EXPECT_LT(accumulated_error(dwpe, pre_wpe, g_wpe), kGradTol);
  // Rows of tokens that never occur are left exactly as they were.
  for (int v : {2, 4, 6})
    for (int c = 0; c < C; ++c) ASSERT_EQ(dwte[v * C + c], pre_wte[v * C + c]) << "row " << v;
}

// ------------------------------------------------------------------------------------ layernorm

struct LayernormCase {
  int N = 5, C = 37;  // C: two full 16-channel slices and a ragged one
  std::vector<float> inp, w, b, R, mean, rstd;
  explicit LayernormCase(std::mt19937& rng, int n = 5, int c = 37) : N(n), C(c) {
    inp = ref::random_floats(rng, N * C, 1.5f);
    for (float& x : inp) x -= 0.5f;
    w = ref::random_floats(rng, C);
    b = ref::random_floats(rng, C);
    R = ref::random_floats(rng, N * C);
    std::vector<float> out(N * C);
    mean.resize(N);
    rstd.resize(N);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  }
  void backward(std::vector<float>& dinp, std::vector<float>& dw, std::vector<float>& db) const {
    cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), R.data(), inp.data(), w.data(),
                            mean.data(), rstd.data(), N, C);
  }
};

TEST(OpsBackward, LayernormAgainstFiniteDifferencesAllAccumulate) {
  ref::ScopedThreads threads(2);
  std::mt19937 rng(12);
  const LayernormCase k(rng);
  const int N = k.N, C = k.C;
  // All three gradients accumulate: dinp too (a layernorm's input is the residual stream).
  const auto pre_inp = ref::random_floats(rng, N * C), pre_w = ref::random_floats(rng, C),
             pre_b = ref::random_floats(rng, C);
  auto dinp = pre_inp, dw = pre_w, db = pre_b;
  k.backward(dinp, dw, db);

  const Vec x = to_double(k.inp), w = to_double(k.w), b = to_double(k.b), Rd = to_double(k.R);
  const Vec g_inp =
      ref::fd_gradient([&](const Vec& v) { return ref::layernorm(v, w, b, N, C); }, x, Rd);
  const Vec g_w =
      ref::fd_gradient([&](const Vec& v) { return ref::layernorm(x, v, b, N, C); }, w, Rd);
  const Vec g_b =
      ref::fd_gradient([&](const Vec& v) { return ref::layernorm(x, w, v, N, C); }, b, Rd);
  EXPECT_LT(accumulated_error(dinp, pre_inp, g_inp), kGradTol);
  EXPECT_LT(accumulated_error(dw, pre_w, g_w), kGradTol);
  EXPECT_LT(accumulated_error(db, pre_b, g_b), kGradTol);

  // A second call adds the same gradient again to all three.
  auto dinp2 = dinp, dw2 = dw, db2 = db;
  k.backward(dinp2, dw2, db2);
  Vec twice_inp(g_inp), twice_w(g_w), twice_b(g_b);
  for (double& g : twice_inp) g *= 2;
  for (double& g : twice_w) g *= 2;
  for (double& g : twice_b) g *= 2;
  EXPECT_LT(accumulated_error(dinp2, pre_inp, twice_inp), kGradTol);
  EXPECT_LT(accumulated_error(dw2, pre_w, twice_w), kGradTol);
  EXPECT_LT(accumulated_error(db2, pre_b, twice_b), kGradTol);
}

// ------------------------------------------------------------------------------------ matmul

TEST(OpsBackward, MatmulAgainstFiniteDifferencesDinpOverwrittenParamsAccumulate) {
  ref::ScopedThreads threads(2);
  std::mt19937 rng(13);
  const int N = 7, C = 19, OC = 37;
  const auto inp = ref::random_floats(rng, N * C), w = ref::random_floats(rng, OC * C),
             bias = ref::random_floats(rng, OC), R = ref::random_floats(rng, N * OC);
  const auto pre_w = ref::random_floats(rng, OC * C), pre_b = ref::random_floats(rng, OC);
  std::vector<float> dinp(N * C, kNaN);  // garbage: must be overwritten, not read
  auto dw = pre_w, db = pre_b;
  cpu::matmul_backward(dinp.data(), dw.data(), db.data(), R.data(), inp.data(), w.data(), N, C, OC);

  const Vec x = to_double(inp), wd = to_double(w), bd = to_double(bias), Rd = to_double(R);
  const Vec g_inp =
      ref::fd_gradient([&](const Vec& v) { return ref::matmul(v, wd, bd, N, C, OC); }, x, Rd);
  const Vec g_w =
      ref::fd_gradient([&](const Vec& v) { return ref::matmul(x, v, bd, N, C, OC); }, wd, Rd);
  const Vec g_b =
      ref::fd_gradient([&](const Vec& v) { return ref::matmul(x, wd, v, N, C, OC); }, bd, Rd);
  EXPECT_LT(rel_error(dinp, g_inp), kGradTol);
  EXPECT_LT(accumulated_error(dw, pre_w, g_w), kGradTol);
  EXPECT_LT(accumulated_error(db, pre_b, g_b), kGradTol);

  // Second call: dinp is the same (overwritten, not doubled); dweight and dbias get it twice.
  auto dinp2 = dinp, dw2 = dw, db2 = db;
  cpu::matmul_backward(dinp2.data(), dw2.data(), db2.data(), R.data(), inp.data(), w.data(), N, C,
                       OC);
  EXPECT_TRUE(bit_identical(dinp2, dinp));
  Vec twice_w(g_w), twice_b(g_b);
  for (double& g : twice_w) g *= 2;
  for (double& g : twice_b) g *= 2;
  EXPECT_LT(accumulated_error(dw2, pre_w, twice_w), kGradTol);
  EXPECT_LT(accumulated_error(db2, pre_b, twice_b), kGradTol);

  // dinp and dbias may be null; dweight is still accumulated correctly.
  auto dw3 = pre_w;
  cpu::matmul_backward(nullptr, dw3.data(), nullptr, R.data(), inp.data(), w.data(), N, C, OC);
  EXPECT_LT(accumulated_error(dw3, pre_w, g_w), kGradTol);
}

// ------------------------------------------------------------------------------------ attention

TEST(OpsBackward, AttentionAgainstFiniteDifferencesDqkvOverwritten) {
  ref::ScopedThreads threads(2);
  std::mt19937 rng(14);
  const int B = 2, T = 6, C = 12, NH = 3;
  const auto qkv = ref::random_floats(rng, B * T * 3 * C), R = ref::random_floats(rng, B * T * C);
  std::vector<float> out(B * T * C), att(B * NH * T * T);
  cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  std::vector<float> dqkv(B * T * 3 * C, kNaN);  // garbage: must be overwritten
  cpu::attention_backward(dqkv.data(), R.data(), qkv.data(), att.data(), B, T, C, NH);

  const Vec g = ref::fd_gradient([&](const Vec& v) { return ref::attention(v, B, T, C, NH); },
                                 to_double(qkv), to_double(R));
  EXPECT_LT(rel_error(dqkv, g), kGradTol);
  // The q, k and v parts each carry gradient (a layout mix-up would zero or swap one of them).
  for (int part = 0; part < 3; ++part) {
    std::vector<float> got;
    Vec want;
    for (int n = 0; n < B * T; ++n)
      for (int c = 0; c < C; ++c) {
        got.push_back(dqkv[n * 3 * C + part * C + c]);
        want.push_back(g[n * 3 * C + part * C + c]);
      }
    EXPECT_LT(rel_error(got, want), kGradTol) << "part " << part;
  }

  // Second call over the previous result: overwritten, so identical.
  auto dqkv2 = dqkv;
  cpu::attention_backward(dqkv2.data(), R.data(), qkv.data(), att.data(), B, T, C, NH);
  EXPECT_TRUE(bit_identical(dqkv2, dqkv));
}

// ------------------------------------------------------------------------------------ gelu

TEST(OpsBackward, GeluAgainstFiniteDifferencesDinpOverwritten) {
  ref::ScopedThreads threads(2);
  std::mt19937 rng(15);
  const std::size_t n = 103;
  auto x = ref::random_floats(rng, n, 2.0f);
  x[0] = 0.0f;
  x[1] = -6.0f;
  x[2] = 6.0f;
  const auto R = ref::random_floats(rng, n);
  std::vector<float> dinp(n, kNaN);
  cpu::gelu_backward(dinp.data(), x.data(), R.data(), n);
  const Vec g = ref::fd_gradient([](const Vec& v) { return ref::gelu(v); }, to_double(x),
                                 to_double(R));
  EXPECT_LT(rel_error(dinp, g), kGradTol);
  auto dinp2 = dinp;
  cpu::gelu_backward(dinp2.data(), x.data(), R.data(), n);
  EXPECT_TRUE(bit_identical(dinp2, dinp));
}

// ------------------------------------------------------------------- LM head + cross-entropy

struct CrossEntropyCase {
  int N, C, V, Vp;
  std::vector<float> x, wte;
  std::vector<std::int32_t> targets;
  CrossEntropyCase(std::mt19937& rng, int n, int c, int v, int vp, float scale)
      : N(n), C(c), V(v), Vp(vp) {
    x = ref::random_floats(rng, static_cast<std::size_t>(N) * C, scale);
    wte = ref::random_floats(rng, static_cast<std::size_t>(V) * C, scale);
    // Padding rows that would dominate the softmax if they were (wrongly) included.
    wte.resize(static_cast<std::size_t>(Vp) * C, 3.0f);
    std::uniform_int_distribution<int> tgt(0, V - 1);
    targets.resize(N);
    for (auto& t : targets) t = tgt(rng);
    targets[0] = V - 1;
    targets[N - 1] = 0;
  }
};

TEST(OpsBackward, CrossEntropyAgainstFiniteDifferences) {
  ref::ScopedThreads threads(2);
  std::mt19937 rng(16);
  const CrossEntropyCase k(rng, 5, 6, 13, 16, 1.0f);
  const int N = k.N, C = k.C, V = k.V, Vp = k.Vp;
  const float grad_scale = 0.37f;
  ASSERT_EQ(cpu::lm_head_chunk_rows(N, Vp), N);  // one chunk here; the chunked case is below
  std::vector<float> losses(N, kNaN), dx(N * C, kNaN), scratch(N * Vp, kNaN);
  const auto pre_wte = ref::random_floats(rng, Vp * C);
  auto dwte = pre_wte;
  const double total =
      cpu::lm_head_cross_entropy(losses.data(), dx.data(), dwte.data(), k.x.data(), k.wte.data(),
                                 k.targets.data(), N, C, V, Vp, grad_scale, scratch.data());

  const Vec x = to_double(k.x), w = to_double(k.wte);
  const Vec want_losses = ref::cross_entropy(x, w, k.targets, N, C, V, Vp);
  EXPECT_LT(rel_error(losses, want_losses), 5e-6);  // forward: fp32 log-sum-exp over 13 terms
  double sum = 0.0;
  for (float l : losses) sum += l;
  EXPECT_DOUBLE_EQ(total, sum);

  // Truth: d(grad_scale * sum(losses)) by finite differences, R = grad_scale everywhere.
  const Vec R(N, grad_scale);
  const Vec g_x = ref::fd_gradient(
      [&](const Vec& v) { return ref::cross_entropy(v, w, k.targets, N, C, V, Vp); }, x, R);
  const Vec g_wte = ref::fd_gradient(
      [&](const Vec& v) { return ref::cross_entropy(x, v, k.targets, N, C, V, Vp); }, w, R);
  EXPECT_LT(rel_error(dx, g_x), kGradTol);
  EXPECT_LT(accumulated_error(dwte, pre_wte, g_wte), kGradTol);
  // Padding rows are outside the softmax: zero gradient, so exactly their old value.
  for (int r = V; r < Vp; ++r)
    for (int c = 0; c < C; ++c) ASSERT_EQ(dwte[r * C + c], pre_wte[r * C + c]) << "row " << r;

  // The analytic reference used for the large case below agrees with finite differences.
  Vec adx, adwte;
  ref::cross_entropy_backward(adx, adwte, x, w, k.targets, N, C, V, Vp, grad_scale);
  for (std::size_t i = 0; i < adx.size(); ++i) ASSERT_NEAR(adx[i], g_x[i], 1e-7);
  for (std::size_t i = 0; i < adwte.size(); ++i) ASSERT_NEAR(adwte[i], g_wte[i], 1e-7);

  // Without dx, only the losses are computed and dwte is untouched.
  std::vector<float> losses2(N, kNaN);
  auto dwte2 = pre_wte;
  const double total2 =
      cpu::lm_head_cross_entropy(losses2.data(), nullptr, dwte2.data(), k.x.data(), k.wte.data(),
                                 k.targets.data(), N, C, V, Vp, grad_scale, scratch.data());
  EXPECT_TRUE(bit_identical(losses2, losses));
  EXPECT_EQ(total2, total);
  EXPECT_TRUE(bit_identical(dwte2, pre_wte));
}

TEST(OpsBackward, CrossEntropyChunkedOverLargeVocabulary) {
  ref::ScopedThreads threads(2);
  std::mt19937 rng(17);
  // Vp just over 1 Mi columns: the 128 MiB logits budget then holds fewer than 32 rows, so chunks
  // are 16 rows and N = 37 rows take three of them (16, 16, 5). V is GPT-2's vocabulary; the other
  // ~1M columns are padding, which must stay out of the softmax and get no gradient.
  const int N = 37, C = 4, Vp = (1 << 20) + 4096, V = 50257;
  const int rows = cpu::lm_head_chunk_rows(N, Vp);
  ASSERT_LT(rows, N);
  ASSERT_GE((N + rows - 1) / rows, 3) << "want several chunks, got rows=" << rows;
  const CrossEntropyCase k(rng, N, C, V, Vp, 1.0f);
  const float grad_scale = 2.5f;
  std::vector<float> losses(N, kNaN), dx(N * C, kNaN);
  std::vector<float> scratch(static_cast<std::size_t>(rows) * Vp);
  std::vector<float> dwte(static_cast<std::size_t>(Vp) * C, 0.5f);  // known prefill
  cpu::lm_head_cross_entropy(losses.data(), dx.data(), dwte.data(), k.x.data(), k.wte.data(),
                             k.targets.data(), N, C, V, Vp, grad_scale, scratch.data());

  // The reference only needs the first V rows of wte (padding is outside the softmax).
  const Vec x = to_double(k.x);
  const Vec w(k.wte.begin(), k.wte.begin() + static_cast<std::ptrdiff_t>(V) * C);
  Vec want_losses, want_dx, want_dwte;
  ref::cross_entropy_backward(want_dx, want_dwte, x, w, k.targets, N, C, V, V, grad_scale,
                              &want_losses);
  // The softmax denominator (50257 terms) is summed in double by the op, so what remains is the
  // fp32 rounding of logits and of the products. Errors from a formula or chunking bug are O(1).
  EXPECT_LT(rel_error(losses, want_losses), 2e-5);
  EXPECT_LT(rel_error(dx, want_dx), kGradTol);
  const std::vector<float> got_dwte(dwte.begin(), dwte.begin() + static_cast<std::ptrdiff_t>(V) * C);
  EXPECT_LT(accumulated_error(got_dwte, std::vector<float>(got_dwte.size(), 0.5f), want_dwte),
            kGradTol);
  // Every chunk's rows are right, the last chunk's (rows 32..36) on their own too.
  const std::vector<float> tail(dx.begin() + 32 * C, dx.end());
  EXPECT_LT(rel_error(tail, Vec(want_dx.begin() + 32 * C, want_dx.end())), kGradTol);
  // Padding rows get exactly zero gradient.
  std::size_t touched = 0;
  for (std::size_t i = static_cast<std::size_t>(V) * C; i < dwte.size(); ++i) touched += dwte[i] != 0.5f;
  EXPECT_EQ(touched, 0u) << "padding elements of dwte were changed";
}

// ------------------------------------------------------------------------------------ AdamW

TEST(OpsBackward, AdamWMatchesTorchAdamWOverSeveralSteps) {
  ref::ScopedThreads threads(2);
  std::mt19937 rng(18);
  const std::size_t n = 1001;
  const cpu::AdamWParams h{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0};
  const ref::AdamW rh{h.lr, h.beta1, h.beta2, h.eps, h.weight_decay};
  const float grad_scale = 0.6f;
  auto param = ref::random_floats(rng, n);
  std::vector<float> m(n, 0.f), v(n, 0.f);
  Vec rparam = to_double(param), rm(n, 0.0), rv(n, 0.0);
  for (int t = 1; t <= 5; ++t) {
    auto grad = ref::random_floats(rng, n, 0.1f * t);
    for (std::size_t i = 0; i < 10; ++i) grad[i] = 0.f;  // pure weight decay for these
    const Vec before = rparam;
    cpu::AdamWParams ht = h;
    ht.t = t;
    cpu::adamw_update(param.data(), grad.data(), m.data(), v.data(), n, ht, grad_scale);
    ref::adamw_step(rparam, to_double(grad), rm, rv, rh, t, grad_scale);
    // Moments: a few fp32 roundings per step.
    EXPECT_LT(rel_error(m, rm), 1e-6) << "step " << t;
    EXPECT_LT(rel_error(v, rv), 1e-6) << "step " << t;
    // The step itself (param - previous param), relative to its size lr: fp32 rounding of a
    // parameter of size ~3 is ~2e-7 absolute per step, 2e-5 of an lr = 1e-2 step.
    Vec want_step(n);
    std::vector<float> got_step(n);
    for (std::size_t i = 0; i < n; ++i) {
      want_step[i] = rparam[i] - before[i];
      got_step[i] = static_cast<float>(static_cast<double>(param[i]) - before[i]);
    }
    EXPECT_LT(rel_error(got_step, want_step), 1e-4) << "step " << t;
    EXPECT_LT(rel_error(param, rparam), 1e-6) << "step " << t;
    for (std::size_t i = 0; i < 10; ++i)
      ASSERT_NEAR(param[i], rparam[i], 1e-6) << "zero-gradient element " << i;
  }
}

// ------------------------------------------------------------------------------------ sum_squares

TEST(OpsBackward, SumSquaresIndependentOfThreadCount) {
  std::mt19937 rng(19);
  const std::size_t n = std::size_t{5} * 65536 + 77;
  const auto x = ref::random_floats(rng, n);
  double want = 0.0;
  for (float v : x) want += static_cast<double>(v) * v;
  double one, two;
  {
    ref::ScopedThreads t(1);
    one = cpu::sum_squares(x.data(), n);
  }
  {
    ref::ScopedThreads t(2);
    two = cpu::sum_squares(x.data(), n);
  }
  EXPECT_NEAR(one, want, 1e-12 * want);
  EXPECT_EQ(std::memcmp(&one, &two, sizeof(double)), 0) << one << " vs " << two;
}

// ------------------------------------------------------------------------------------ determinism

// Runs `fn` (which fills its outputs from fixed inputs) twice with 2 threads and once with 1, and
// expects bit-identical outputs every time. `what` says which thread counts change: OpenMP and
// OpenBLAS together (as make_cpu_device(threads) sets them), or OpenMP only (OpenBLAS kept at 2).
enum class Vary { OmpAndBlas, OmpOnly };
template <typename Fn>
void expect_deterministic(Fn fn, Vary what = Vary::OmpAndBlas) {
  const int blas1 = what == Vary::OmpAndBlas ? 1 : 2;
  std::vector<std::vector<float>> a, b, c;
  {
    ref::ScopedThreads t(2, 2);
    int team = 0;
#pragma omp parallel
    {
#pragma omp single
      team = omp_get_num_threads();
    }
    ASSERT_EQ(team, 2) << "the 2-thread runs must really use 2 threads";
    a = fn();
    b = fn();
  }
  {
    ref::ScopedThreads t(1, blas1);
    c = fn();
  }
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), c.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(bit_identical(a[i], b[i])) << "output " << i << " differs between two runs";
    EXPECT_TRUE(bit_identical(a[i], c[i])) << "output " << i << " differs between 2 and 1 threads";
  }
}

TEST(OpsDeterminism, AttentionBackward) {
  std::mt19937 rng(20);
  const int B = 2, T = 64, C = 64, NH = 4;
  const auto qkv = ref::random_floats(rng, B * T * 3 * C), R = ref::random_floats(rng, B * T * C);
  std::vector<float> out(B * T * C), att(B * NH * T * T);
  cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  expect_deterministic([&] {
    std::vector<float> dqkv(B * T * 3 * C, kNaN);
    cpu::attention_backward(dqkv.data(), R.data(), qkv.data(), att.data(), B, T, C, NH);
    return std::vector<std::vector<float>>{dqkv};
  });
}

TEST(OpsDeterminism, LayernormBackward) {
  std::mt19937 rng(21);
  const LayernormCase k(rng, 256, 88);
  const auto pre = ref::random_floats(rng, 256 * 88);
  expect_deterministic([&] {
    std::vector<float> dinp = pre, dw(88, 0.25f), db(88, -0.5f);
    k.backward(dinp, dw, db);
    return std::vector<std::vector<float>>{dinp, dw, db};
  });
}

struct MatmulCase {
  static constexpr int N = 256, C = 192, OC = 160;  // big enough that OpenBLAS uses its threads
  std::vector<float> inp, w, R;
  explicit MatmulCase(std::mt19937& rng)
      : inp(ref::random_floats(rng, N * C)), w(ref::random_floats(rng, OC * C)),
        R(ref::random_floats(rng, N * OC)) {}
  std::vector<std::vector<float>> backward() const {
    std::vector<float> dinp(N * C, kNaN), dw(OC * C, 0.125f), db(OC, 1.0f);
    cpu::matmul_backward(dinp.data(), dw.data(), db.data(), R.data(), inp.data(), w.data(), N, C,
                         OC);
    return {dinp, dw, db};
  }
};

// Twice, and with 1 vs 2 OpenMP threads (the op's own dbias reduction); OpenBLAS kept at 2.
TEST(OpsDeterminism, MatmulBackward) {
  std::mt19937 rng(22);
  const MatmulCase k(rng);
  expect_deterministic([&] { return k.backward(); }, Vary::OmpOnly);
}

// With the device's thread count changed as make_cpu_device(threads) changes it: OpenMP and
// OpenBLAS together. ops.h promises results that do not depend on the thread count; with OpenBLAS
// 0.3.21 the sgemm-computed dinp and dweight differ in the last bits between 1 and 2 threads.
TEST(OpsDeterminism, EmbeddingBackward) {
  std::mt19937 rng(23);
  const int B = 4, T = 32, C = 72, V = 9;
  std::vector<std::int32_t> tokens(B * T);
  for (int i = 0; i < B * T; ++i) tokens[i] = (i * 7) % V;
  const auto R = ref::random_floats(rng, B * T * C);
  expect_deterministic([&] {
    std::vector<float> dwte(V * C, 0.f), dwpe(T * C, 0.f);
    cpu::embedding_backward(dwte.data(), dwpe.data(), R.data(), tokens.data(), B, T, C);
    return std::vector<std::vector<float>>{dwte, dwpe};
  });
}

}  // namespace
}  // namespace pipelane
