// The Llama family's emulated kernels (cuda_ops_llama.h), fp32 and bf16, against the double
// reference (tests/runtime/reference_ops_llama.h, or the derivative written out) and the CPU op:
// RMSNorm forward and backward (its two halves), RoPE both ways, SwiGLU both ways, the grouped
// causal fix-up around the GQA GEMMs (a NaN column must reach only the causal outputs), the
// KV-cache attention with GQA in two calls, the token lookup's backward. Odd sizes: C and hs not
// multiples of 32, T = 1, kv_heads = 1 (MQA) and 2.
// fp32 NMSE limits, as test_layernorm.cpp / test_attention.cpp argue: elementwise ops (a few
// roundings, expf within an ulp or two) 1e-12; row reductions (RMSNorm, attention) 1e-11, and
// their gradients, column sums over N rows, 1e-11. Against the CPU op 4x.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/cuda/cuda_ops_llama.h"
#include "runtime/cuda/kernels/attention_gqa.cuh"
#include "runtime/cuda/kernels/embedding.cuh"
#include "runtime/cuda/kernels/kv_attention.cuh"
#include "runtime/cuda/kernels/rmsnorm.cuh"
#include "runtime/cuda/kernels/rope.cuh"
#include "runtime/cuda/kernels/swiglu.cuh"
#include "tests/cuda/kernel_check.h"
#include "tests/runtime/reference_ops_llama.h"
#if !PIPELANE_CUDA_TEST_SANITIZER
#include "runtime/cpu/cpu_ops.h"
#endif

// A namespace of its own: the emulated test executables are unity builds.
namespace pipelane::cuda_test::llama_kernels_test {
namespace {

constexpr double kElementwiseNmse = 1e-12;
constexpr double kReductionNmse = 1e-11;

struct Shape {
  int B, T, NH, KVH, hs;
};
std::vector<Shape> shapes() {
  if (kSanitizer) return {{1, 3, 2, 1, 6}, {2, 1, 2, 2, 4}};
  return {{2, 5, 4, 2, 6}, {1, 1, 3, 1, 10}, {1, 37, 2, 2, 34}};
}

template <typename T>
class LlamaKernels : public ::testing::Test {};
TYPED_TEST_SUITE(LlamaKernels, StorageTypes);

#define SHAPE_TRACE(T, s)                                                                                       \
  SCOPED_TRACE(::testing::Message() << type_name<T>() << " B=" << s.B << " T=" << s.T << " NH=" << s.NH << " KVH=" \
                                    << s.KVH << " hs=" << s.hs)

TYPED_TEST(LlamaKernels, RmsnormForwardAndBackward) {
  using T = TypeParam;
  for (const Shape s : shapes()) {
    SHAPE_TRACE(T, s);
    const int N = s.B * s.T, C = s.NH * s.hs + 1;
    const float eps = 1e-5f;
    std::mt19937 rng(100u * N + C);
    const std::size_t NC = static_cast<std::size_t>(N) * C;
    const auto x = random_values<T>(rng, NC, 2.0f, 0.3f), w = random_values<T>(rng, C, 0.2f, 1.0f);
    const auto dout = random_values<T>(rng, NC), dinp0 = random_values<T>(rng, NC);
    const auto dw0 = random_values<float>(rng, C);
    Guarded<T> out(NC), gx(x), gw(w), gd(dout), dinp(dinp0);
    Guarded<float> rstd(N), dw(dw0), scratch(cuda::rmsnorm_backward_scratch_floats(N, C));
    cuda::rmsnorm_forward(out.data(), rstd.data(), gx.data(), gw.data(), N, C, eps, nullptr);
    Vec r;
    const Vec X = to_double(x), W = to_double(w), D = to_double(dout);
    EXPECT_TRUE(matches("out", out, ref::rmsnorm(X, W, N, C, eps, &r), kReductionNmse));
    EXPECT_TRUE(matches("rstd", rstd, r, kReductionNmse));
    cuda::rmsnorm_backward_input(dinp.data(), gd.data(), gx.data(), gw.data(), rstd.data(), N, C, nullptr);
    cuda::rmsnorm_backward_params(dw.data(), gd.data(), gx.data(), rstd.data(), N, C, scratch.data(), nullptr);
    // dx = r (w dy) - x r^3 mean(w dy x); dw += x r dy, with the kernels' own rstd.
    Vec want_dinp = to_double(dinp0), want_dw = to_double(dw0);
    for (int n = 0; n < N; ++n) {
      const double rn = rstd.data()[n];
      double dot = 0;
      for (int c = 0; c < C; ++c) dot += W[c] * D[n * C + c] * X[n * C + c];
      for (int c = 0; c < C; ++c) {
        want_dinp[n * C + c] += rn * W[c] * D[n * C + c] - X[n * C + c] * rn * rn * rn * dot / C;
        want_dw[c] += X[n * C + c] * rn * D[n * C + c];
      }
    }
    EXPECT_TRUE(matches("dinp", dinp, want_dinp, kReductionNmse));
    EXPECT_TRUE(matches("dweight", dw, want_dw, kReductionNmse));
    EXPECT_TRUE(intact("scratch", scratch));
#if !PIPELANE_CUDA_TEST_SANITIZER
    std::vector<float> cout(NC), crstd(N), cdinp = to_floats(dinp0), cdw = dw0;
    cpu::rmsnorm_forward(cout.data(), crstd.data(), to_floats(x).data(), to_floats(w).data(), N, C, eps);
    cpu::rmsnorm_backward_input(cdinp.data(), to_floats(dout).data(), to_floats(x).data(), to_floats(w).data(),
                                rstd.values().data(), N, C);
    cpu::rmsnorm_backward_params(cdw.data(), to_floats(dout).data(), to_floats(x).data(), rstd.values().data(), N, C);
    EXPECT_TRUE(matches("out vs cpu", out, cout, 4 * kReductionNmse));
    EXPECT_TRUE(matches("dinp vs cpu", dinp, cdinp, 4 * kReductionNmse));
    EXPECT_TRUE(matches("dweight vs cpu", dw, cdw, 4 * kReductionNmse));
#endif
  }
}

TYPED_TEST(LlamaKernels, RopeBothWays) {
  using T = TypeParam;
  for (const Shape s : shapes()) {
    SHAPE_TRACE(T, s);
    const int heads = s.NH, hs = s.hs, ld = heads * hs + 3, pos0 = 2, N = s.B * s.T;
    std::mt19937 rng(300u * N + hs);
    std::vector<float> table(static_cast<std::size_t>(pos0 + s.T) * hs);
    std::uniform_real_distribution<double> angle(-7.0, 7.0);
    for (int p = 0; p < pos0 + s.T; ++p)
      for (int i = 0; i < hs / 2; ++i) {
        const double a = angle(rng);
        table[p * hs + i] = static_cast<float>(std::cos(a));
        table[p * hs + hs / 2 + i] = static_cast<float>(std::sin(a));
      }
    const auto x = random_values<T>(rng, static_cast<std::size_t>(N) * ld);
    Guarded<float> gt(table);
    for (const bool inverse : {false, true}) {
      Guarded<T> gx(x);
      cuda::rope_rotate(gx.data(), gt.data(), s.B, s.T, pos0, heads, hs, ld, inverse, nullptr);
      const Vec want = ref::rope(to_double(x), to_double(table), s.B, s.T, pos0, heads, hs, ld, inverse ? -1 : 1);
      EXPECT_TRUE(matches(inverse ? "backward" : "forward", gx, want, kElementwiseNmse));
#if !PIPELANE_CUDA_TEST_SANITIZER
      std::vector<float> c = to_floats(x);
      (inverse ? cpu::rope_backward : cpu::rope_forward)(c.data(), table.data(), s.B, s.T, pos0, heads, hs, ld);
      EXPECT_TRUE(matches("vs cpu", gx, c, 4 * kElementwiseNmse));
#endif
    }
  }
}

TYPED_TEST(LlamaKernels, SwigluBothWays) {
  using T = TypeParam;
  for (const Shape s : shapes()) {
    SHAPE_TRACE(T, s);
    const std::size_t n = static_cast<std::size_t>(s.B) * s.T * (3 * s.hs + 1);
    std::mt19937 rng(500u + n);
    const auto gate = random_values<T>(rng, n, 3.0f), up = random_values<T>(rng, n), dout = random_values<T>(rng, n);
    Guarded<T> gg(gate), gu(up), gd(dout), out(n), dgate(n), dup(n);
    cuda::swiglu_forward(out.data(), gg.data(), gu.data(), n, nullptr);
    cuda::swiglu_backward(dgate.data(), dup.data(), gd.data(), gg.data(), gu.data(), n, nullptr);
    const Vec G = to_double(gate), U = to_double(up), D = to_double(dout);
    Vec wdg(n), wdu(n);
    for (std::size_t i = 0; i < n; ++i) {
      const double sig = 1 / (1 + std::exp(-G[i]));
      wdg[i] = D[i] * U[i] * sig * (1 + G[i] * (1 - sig));
      wdu[i] = D[i] * G[i] * sig;
    }
    EXPECT_TRUE(matches("out", out, ref::swiglu(G, U), kElementwiseNmse));
    EXPECT_TRUE(matches("dgate", dgate, wdg, kElementwiseNmse));
    EXPECT_TRUE(matches("dup", dup, wdu, kElementwiseNmse));
#if !PIPELANE_CUDA_TEST_SANITIZER
    std::vector<float> co(n), cdg(n), cdu(n);
    cpu::swiglu_forward(co.data(), to_floats(gate).data(), to_floats(up).data(), n);
    cpu::swiglu_backward(cdg.data(), cdu.data(), to_floats(dout).data(), to_floats(gate).data(), to_floats(up).data(), n);
    EXPECT_TRUE(matches("out vs cpu", out, co, 4 * kElementwiseNmse));
    EXPECT_TRUE(matches("dgate vs cpu", dgate, cdg, 4 * kElementwiseNmse));
#endif
  }
}

// The grouped fix-up: out starts as what a GEMM over the full (masked) P leaves, NaN included
// where 0 * NaN reaches; after the fix-up it must equal the causal-only product, NaN exactly where
// a causal term carries it, and finite columns must be left as they were (bits).
TYPED_TEST(LlamaKernels, GroupedCausalFixup) {
  using T = TypeParam;
  for (const Shape s : shapes()) {
    SHAPE_TRACE(T, s);
    const int G = s.NH / s.KVH, Tn = s.T, hs = s.hs, BNH = s.B * s.NH, BKV = s.B * s.KVH;
    std::mt19937 rng(700u * Tn + hs);
    auto P = random_values<T>(rng, static_cast<std::size_t>(BNH) * Tn * Tn);
    for (int r = 0; r < BNH; ++r)
      for (int i = 0; i < Tn; ++i)
        for (int j = i + 1; j < Tn; ++j) P[(static_cast<std::size_t>(r) * Tn + i) * Tn + j] = from_float<T>(0.f);
    for (const bool transposed : {false, true}) {
      const int xb = transposed ? BNH : BKV, ob = transposed ? BKV : BNH;
      auto X = random_values<T>(rng, static_cast<std::size_t>(xb) * Tn * hs);
      // A NaN in the last block's column hs/2: in its last row (reaching only the last output row
      // through the causal terms) or, transposed, in its first row (reaching only output row 0).
      const int nan_row = transposed ? 0 : Tn - 1;
      X[(static_cast<std::size_t>(xb - 1) * Tn + nan_row) * hs + hs / 2] = from_float<T>(NAN);
      const Vec Pd = to_double(P), Xd = to_double(X);
      // full[o] and causal[o] for output block ob_i, column d.
      Vec full(static_cast<std::size_t>(ob) * Tn * hs, 0.0), causal(full.size(), 0.0);
      for (int r = 0; r < ob; ++r)
        for (int g = 0; g < (transposed ? G : 1); ++g) {
          const std::size_t pr = transposed ? static_cast<std::size_t>(r) * G + g : r;
          const std::size_t xr = transposed ? pr : static_cast<std::size_t>(r / G);
          for (int o = 0; o < Tn; ++o)
            for (int j = 0; j < Tn; ++j)
              for (int d = 0; d < hs; ++d) {
                const double p = transposed ? Pd[(pr * Tn + j) * Tn + o] : Pd[(pr * Tn + o) * Tn + j];
                const double term = p * Xd[(xr * Tn + j) * hs + d];
                const std::size_t at = (static_cast<std::size_t>(r) * Tn + o) * hs + d;
                full[at] += term;
                if (transposed ? j >= o : j <= o) causal[at] += term;
              }
        }
      std::vector<T> before(full.size());
      for (std::size_t i = 0; i < full.size(); ++i) before[i] = from_float<T>(static_cast<float>(full[i]));
      Guarded<T> out(before), gp(P), gx(X);
      cuda::attention_gqa_causal_fixup(out.data(), gp.data(), gx.data(), transposed, ob, G, Tn, hs, nullptr);
      int nans = 0;
      for (double v : causal) nans += std::isnan(v);
      EXPECT_GT(nans, 0) << "the NaN reaches no causal output";
      EXPECT_TRUE(matches(transposed ? "transposed" : "not transposed", out, causal, kReductionNmse));
      for (std::size_t i = 0; i < full.size(); ++i)  // finite columns: untouched
        if (!std::isnan(full[i]) && std::memcmp(&out.data()[i], &before[i], sizeof(T)) != 0) {
          ADD_FAILURE() << "a finite output changed at " << i;
          break;
        }
    }
  }
}

TYPED_TEST(LlamaKernels, KvCacheAttentionWithGqaInTwoCalls) {
  using T = TypeParam;
  for (const Shape s : shapes()) {
    SHAPE_TRACE(T, s);
    // At most 12 positions: a block per (position, head) is costly in the emulator, and one tile
    // of keys is what these sizes exercise anyway (kv_attention.cuh's tiles hold 128).
    const int S = std::min(s.T, 9) + 3, past = s.T > 1 ? 2 : 1, NH = s.NH, KVH = s.KVH, hs = s.hs;
    const std::size_t qw = static_cast<std::size_t>(NH) * hs, kvw = static_cast<std::size_t>(KVH) * hs;
    std::mt19937 rng(900u * S + hs);
    const auto q = random_values<T>(rng, S * qw), k = random_values<T>(rng, S * kvw), v = random_values<T>(rng, S * kvw);
    Guarded<T> gq(q), gk(k), gv(v), out(S * qw);
    // The cache is k and v themselves here (the backend appends by a copy; tested by the op table).
    cuda::attention_kv_cache_forward_gqa(out.data(), gq.data(), gk.data(), gv.data(), past, 0, NH, KVH, hs, nullptr);
    cuda::attention_kv_cache_forward_gqa(out.data() + past * qw, gq.data() + past * qw, gk.data(), gv.data(), S - past,
                                         past, NH, KVH, hs, nullptr);
    const Vec want = ref::attention_gqa(to_double(q), to_double(k), to_double(v), 1, S, NH, KVH, hs);
    EXPECT_TRUE(matches("out", out, want, kReductionNmse));
  }
}

TYPED_TEST(LlamaKernels, EmbeddingBackwardTokens) {
  using T = TypeParam;
  for (const Shape s : shapes()) {
    SHAPE_TRACE(T, s);
    const int N = s.B * s.T, C = s.NH * s.hs, v0 = 3, vcount = 7, V = 13;
    std::mt19937 rng(1100u * N + C);
    std::uniform_int_distribution<int> pick(0, V - 1);
    std::vector<std::int32_t> tokens(N);
    for (auto& t : tokens) t = pick(rng);
    const auto dout = random_values<T>(rng, static_cast<std::size_t>(N) * C);
    const auto dwte0 = random_values<float>(rng, static_cast<std::size_t>(vcount) * C);
    Guarded<float> dwte(dwte0);
    Guarded<std::int32_t> gt(tokens);
    Guarded<T> gd(dout);
    cuda::embedding_backward_tokens(dwte.data(), gd.data(), gt.data(), N, C, v0, vcount, nullptr);
    Vec want = to_double(dwte0);
    const Vec D = to_double(dout);
    for (int n = 0; n < N; ++n)
      if (tokens[n] >= v0 && tokens[n] < v0 + vcount)
        for (int c = 0; c < C; ++c) want[(tokens[n] - v0) * C + c] += D[n * C + c];
    EXPECT_TRUE(matches("dwte", dwte, want, kReductionNmse));
#if !PIPELANE_CUDA_TEST_SANITIZER
    std::vector<float> c = dwte0;
    cpu::embedding_backward_tokens(c.data(), to_floats(dout).data(), tokens.data(), N, C, v0, vcount);
    // The same additions in the same order: the same bits.
    EXPECT_TRUE(matches("dwte vs cpu", dwte, c, 0.0));
#endif
  }
}

}  // namespace
}  // namespace pipelane::cuda_test::llama_kernels_test
