// Emulated embedding kernels against the double reference and the CPU ops, fp32 and bf16.
// Forward ops are one rounding per element (NMSE limit 1e-14, see test_elementwise.cpp) or exact
// copies (the local lookup: bit-exact). The backward adds each element's rows in the CPU op's
// order starting from the old value, so in fp32 it must equal the CPU op bit for bit; against the
// double reference it is a sum of up to B*T terms: limit 1e-11.
#include <gtest/gtest.h>

#include "runtime/cuda/kernels/embedding.cuh"
#include "tests/cuda/kernel_check.h"
#include "tests/cuda/reference.h"
#include "tests/runtime/reference_ops.h"
#if !PIPELANE_CUDA_TEST_SANITIZER
#include "runtime/cpu/cpu_ops.h"
#endif

// A namespace of its own: the emulated test executables are unity builds.
namespace pipelane::cuda_test::embedding_test {
namespace {

constexpr double kOneRoundingNmse = 1e-14;
constexpr double kSumNmse = 1e-11;

struct Shape {
  int B, T, C, V;
};
// T = 1, C not a multiple of 32, few tokens (many repeats), more rows than a block's threads.
std::vector<Shape> shapes() {
  // (130 rows: the backward's row scan takes two chunks of 128)
  if (kSanitizer) return {{2, 3, 37, 5}, {2, 65, 4, 2}};
  return {{2, 5, 77, 11}, {3, 1, 33, 4}, {2, 70, 40, 7}};
}

std::vector<std::int32_t> random_tokens(std::mt19937& rng, std::size_t n, int V) {
  std::uniform_int_distribution<int> tok(0, V - 1);
  std::vector<std::int32_t> t(n);
  for (auto& x : t) x = tok(rng);
  t.back() = V - 1;  // the last row of wte is used too
  return t;
}

template <typename T>
class Embedding : public ::testing::Test {};
TYPED_TEST_SUITE(Embedding, StorageTypes);

TYPED_TEST(Embedding, Forward) {
  using T = TypeParam;
  for (const auto [B, Tn, C, V] : shapes()) {
    SCOPED_TRACE(::testing::Message() << type_name<T>() << " B=" << B << " T=" << Tn << " C=" << C);
    std::mt19937 rng(100u * C + Tn);
    const int N = B * Tn;
    const auto tokens = random_tokens(rng, N, V);
    const auto wte = random_values<T>(rng, static_cast<std::size_t>(V) * C);
    const auto wpe = random_values<T>(rng, static_cast<std::size_t>(Tn) * C);
    // Vocab-parallel: this rank holds rows [v0, v0 + vcount) of wte.
    const int v0 = V / 3, vcount = V - V / 3 - 1 > 0 ? V - V / 3 - 1 : 1;
    const std::vector<T> wte_local(wte.begin() + static_cast<std::size_t>(v0) * C,
                                   wte.begin() + static_cast<std::size_t>(v0 + vcount) * C);
    struct Out {
      Guarded<T> full, local, positioned;
    };
    const auto run = [&] {
      Out o{Guarded<T>(static_cast<std::size_t>(N) * C),
            Guarded<T>(static_cast<std::size_t>(N) * C),
            Guarded<T>(static_cast<std::size_t>(N) * C)};
      Guarded<std::int32_t> gt(tokens);
      Guarded<T> gwte(wte), gwpe(wpe), gloc(wte_local);
      cuda::embedding_forward(o.full.data(), gt.data(), gwte.data(), gwpe.data(), B, Tn, C,
                              nullptr);
      cuda::embedding_lookup_local(o.local.data(), gt.data(), gloc.data(), N, C, v0, vcount,
                                   nullptr);
      cuda::embedding_lookup_local(o.positioned.data(), gt.data(), gloc.data(), N, C, v0, vcount,
                                   nullptr);
      cuda::add_positions(o.positioned.data(), gwpe.data(), B, Tn, C, nullptr);
      return o;
    };
    const Out o = run(), again = run();
    EXPECT_TRUE(matches("out", o.full,
                        ref::embedding(tokens, to_double(wte), to_double(wpe), B, Tn, C),
                        kOneRoundingNmse));
    Vec local(static_cast<std::size_t>(N) * C, 0.0), positioned;
    for (int n = 0; n < N; ++n)
      if (tokens[n] >= v0 && tokens[n] < v0 + vcount)
        for (int c = 0; c < C; ++c)
          local[static_cast<std::size_t>(n) * C + c] =
              to_float(wte[static_cast<std::size_t>(tokens[n]) * C + c]);
    positioned = local;
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < C; ++c)
        positioned[static_cast<std::size_t>(n) * C + c] +=
            to_float(wpe[static_cast<std::size_t>(n % Tn) * C + c]);
    EXPECT_TRUE(matches("lookup_local", o.local, local, 0.0));
    EXPECT_TRUE(matches("add_positions", o.positioned, positioned, kOneRoundingNmse));
    EXPECT_TRUE(bit_identical("out", o.full, again.full));
    EXPECT_TRUE(bit_identical("positioned", o.positioned, again.positioned));
#if !PIPELANE_CUDA_TEST_SANITIZER
    std::vector<float> c(static_cast<std::size_t>(N) * C);
    cpu::embedding_forward(c.data(), tokens.data(), to_floats(wte).data(), to_floats(wpe).data(), B,
                           Tn, C);
    EXPECT_TRUE(matches("out vs cpu", o.full, c, 4 * kOneRoundingNmse));
#endif
  }
}

TYPED_TEST(Embedding, Backward) {
  using T = TypeParam;
  for (const auto [B, Tn, C, V] : shapes()) {
    SCOPED_TRACE(::testing::Message() << type_name<T>() << " B=" << B << " T=" << Tn << " C=" << C);
    std::mt19937 rng(200u * C + Tn);
    const int N = B * Tn;
    const auto tokens = random_tokens(rng, N, V);
    const auto dout = random_values<T>(rng, static_cast<std::size_t>(N) * C);
    const auto dwte0 = random_values<float>(rng, static_cast<std::size_t>(V) * C);
    const auto dwpe0 = random_values<float>(rng, static_cast<std::size_t>(Tn) * C);
    const int v0 = 1, vcount = V - 2 > 0 ? V - 2 : 1;  // a middle block of the vocabulary
    const std::vector<float> dwte0_local(dwte0.begin() + static_cast<std::size_t>(v0) * C,
                                         dwte0.begin() + static_cast<std::size_t>(v0 + vcount) * C);
    struct Out {
      Guarded<float> dwte, dwpe, dwte_local, dwpe_local;
    };
    const auto run = [&] {
      Out o{Guarded<float>(dwte0), Guarded<float>(dwpe0), Guarded<float>(dwte0_local),
            Guarded<float>(dwpe0)};
      Guarded<std::int32_t> gt(tokens);
      Guarded<T> gd(dout);
      cuda::embedding_backward(o.dwte.data(), o.dwpe.data(), gd.data(), gt.data(), B, Tn, C,
                               nullptr);
      cuda::embedding_backward_local(o.dwte_local.data(), o.dwpe_local.data(), gd.data(), gt.data(),
                                     B, Tn, C, v0, vcount, nullptr);
      return o;
    };
    const Out o = run(), again = run();
    Vec dwte = to_double(dwte0), dwpe = to_double(dwpe0);
    ref2::embedding_backward(dwte, dwpe, to_double(dout), tokens, B, Tn, C, 0, V);
    Vec dwte_local = to_double(dwte0_local), dwpe_local = to_double(dwpe0);
    ref2::embedding_backward(dwte_local, dwpe_local, to_double(dout), tokens, B, Tn, C, v0, vcount);
    EXPECT_TRUE(matches("dwte", o.dwte, dwte, kSumNmse));
    EXPECT_TRUE(matches("dwpe", o.dwpe, dwpe, kSumNmse));
    EXPECT_TRUE(matches("dwte_local", o.dwte_local, dwte_local, kSumNmse));
    EXPECT_TRUE(matches("dwpe_local", o.dwpe_local, dwpe_local, kSumNmse));
    EXPECT_TRUE(bit_identical("dwte", o.dwte, again.dwte));
    EXPECT_TRUE(bit_identical("dwpe", o.dwpe, again.dwpe));
    EXPECT_TRUE(bit_identical("dwpe_local", o.dwpe, o.dwpe_local));
#if !PIPELANE_CUDA_TEST_SANITIZER
    // Same additions in the same order as the CPU op: the same bits.
    auto cdwte = dwte0, cdwpe = dwpe0;
    cpu::embedding_backward(cdwte.data(), cdwpe.data(), to_floats(dout).data(), tokens.data(), B,
                            Tn, C);
    EXPECT_EQ(o.dwte.values(), cdwte);
    EXPECT_EQ(o.dwpe.values(), cdwpe);
#endif
  }
}

}  // namespace
}  // namespace pipelane::cuda_test::embedding_test
