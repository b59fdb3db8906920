// Emulated attention kernels: the permutes (exact copies), the causal softmax forward and
// backward, and KV-cache attention, fp32 and bf16, against the double reference and the CPU op.
// fp32 NMSE limits: softmax 1e-12 (expf's ulp or two plus a sum over <= T terms per row);
// its backward 1e-11 (a dot product over the row, then differences); KV-cache attention 1e-11
// (dot products over hs, softmax, a weighted sum over the cache). Against the CPU op 4x, plus for
// the softmax the rounding of the pre-attention scores to the storage type.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/cuda/kernels/attention.cuh"
#include "runtime/cuda/kernels/kv_attention.cuh"
#include "tests/cuda/kernel_check.h"
#include "tests/cuda/reference.h"
#include "tests/runtime/reference_ops.h"
#if !PIPELANE_CUDA_TEST_SANITIZER
#include "runtime/cpu/cpu_ops.h"
#endif

// A namespace of its own: the emulated test executables are unity builds.
namespace pipelane::cuda_test::attention_test {
namespace {

constexpr double kSoftmaxNmse = 1e-12;
constexpr double kSoftmaxBackwardNmse = 1e-11;
constexpr double kKvNmse = 1e-11;

struct Shape {
  int B, T, C, NH;
};
// T = 1; head size 11 (odd); rows longer than two warps, over several blocks.
std::vector<Shape> shapes() {
  if (kSanitizer) return {{1, 5, 6, 2}, {2, 1, 8, 2}};
  return {{2, 1, 8, 2}, {1, 37, 33, 3}, {1, 70, 8, 1}};
}

template <typename T>
class Attention : public ::testing::Test {};
TYPED_TEST_SUITE(Attention, StorageTypes);

// q k^T per (b, h) in double from qkv[B,T,3C]: [B,NH,T,T].
Vec scores(const Vec& qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  Vec s(static_cast<std::size_t>(B) * NH * T * T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i)
        for (int j = 0; j < T; ++j) {
          double d = 0.0;
          for (int e = 0; e < hs; ++e)
            d += qkv[(static_cast<std::size_t>(b) * T + i) * 3 * C + h * hs + e] *
                 qkv[(static_cast<std::size_t>(b) * T + j) * 3 * C + C + h * hs + e];
          s[((static_cast<std::size_t>(b) * NH + h) * T + i) * T + j] = d;
        }
  return s;
}

TYPED_TEST(Attention, Permutes) {
  using T = TypeParam;
  for (const auto [B, Tn, C, NH] : shapes()) {
    SCOPED_TRACE(::testing::Message() << type_name<T>() << " B=" << B << " T=" << Tn << " C=" << C);
    std::mt19937 rng(7u * C + Tn);
    const std::size_t n = static_cast<std::size_t>(B) * Tn * C;
    const int hs = C / NH;
    const auto qkv = random_values<T>(rng, 3 * n);
    Guarded<T> gqkv(qkv), q(n), k(n), v(n), back(3 * n), out(n), dy(n);
    cuda::attention_permute_qkv(q.data(), k.data(), v.data(), gqkv.data(), B, Tn, C, NH, nullptr);
    // [b,h,t,d] of each part is qkv[b,t,part*C + h*hs + d]
    Vec wq(n), wk(n), wv(n);
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < NH; ++h)
        for (int t = 0; t < Tn; ++t)
          for (int d = 0; d < hs; ++d) {
            const std::size_t dst = ((static_cast<std::size_t>(b) * NH + h) * Tn + t) * hs + d;
            const std::size_t src = (static_cast<std::size_t>(b) * Tn + t) * 3 * C + h * hs + d;
            wq[dst] = to_float(qkv[src]);
            wk[dst] = to_float(qkv[src + C]);
            wv[dst] = to_float(qkv[src + 2 * C]);
          }
    EXPECT_TRUE(matches("q", q, wq, 0.0));
    EXPECT_TRUE(matches("k", k, wk, 0.0));
    EXPECT_TRUE(matches("v", v, wv, 0.0));
    // The backward permute is the inverse, and so are unpermute and its backward.
    cuda::attention_permute_qkv_backward(back.data(), q.data(), k.data(), v.data(), B, Tn, C, NH,
                                         nullptr);
    EXPECT_TRUE(matches("permute backward", back, to_double(qkv), 0.0));
    cuda::attention_unpermute(out.data(), q.data(), B, Tn, C, NH, nullptr);
    cuda::attention_unpermute_backward(dy.data(), out.data(), B, Tn, C, NH, nullptr);
    EXPECT_TRUE(matches("unpermute round trip", dy, wq, 0.0));
    Vec wout(n);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < Tn; ++t)
        for (int c = 0; c < C; ++c)
          wout[(static_cast<std::size_t>(b) * Tn + t) * C + c] =
              to_float(qkv[(static_cast<std::size_t>(b) * Tn + t) * 3 * C + c]);
    EXPECT_TRUE(matches("unpermute", out, wout, 0.0));
  }
}

TYPED_TEST(Attention, Softmax) {
  using T = TypeParam;
  for (const auto [B, Tn, C, NH] : shapes()) {
    SCOPED_TRACE(::testing::Message() << type_name<T>() << " B=" << B << " T=" << Tn << " C=" << C);
    std::mt19937 rng(11u * C + Tn);
    const int rows = B * NH * Tn;
    const std::size_t n = static_cast<std::size_t>(rows) * Tn;
    const float scale = 1.0f / std::sqrt(static_cast<float>(C / NH));
    const auto qkv = random_values<T>(rng, static_cast<std::size_t>(B) * Tn * 3 * C);
    std::vector<T> preatt(n);
    const Vec s = scores(to_double(qkv), B, Tn, C, NH);
    for (std::size_t i = 0; i < n; ++i) preatt[i] = from_float<T>(static_cast<float>(s[i]));
    const auto datt = random_values<T>(rng, n);
    struct Out {
      Guarded<T> att, dpre, inplace;
    };
    const auto run = [&] {
      Out o{Guarded<T>(n), Guarded<T>(n), Guarded<T>(datt)};
      Guarded<T> gp(preatt), gd(datt);
      cuda::attention_softmax_forward(o.att.data(), gp.data(), scale, B * NH, Tn, nullptr);
      cuda::attention_softmax_backward(o.dpre.data(), gd.data(), o.att.data(), scale, B * NH, Tn,
                                       nullptr);
      // dpreatt may overwrite datt
      cuda::attention_softmax_backward(o.inplace.data(), o.inplace.data(), o.att.data(), scale,
                                       B * NH, Tn, nullptr);
      return o;
    };
    const Out o = run(), again = run();
    const Vec att = ref2::causal_softmax(to_double(preatt), scale, rows, Tn);
    EXPECT_TRUE(matches("att", o.att, att, kSoftmaxNmse));
    // The backward from the kernel's own att (isolates the backward's error).
    const Vec dpre =
        ref2::causal_softmax_backward(to_double(datt), o.att.as_double(), scale, rows, Tn);
    EXPECT_TRUE(matches("dpreatt", o.dpre, dpre, kSoftmaxBackwardNmse));
    EXPECT_TRUE(bit_identical("dpreatt in place", o.dpre, o.inplace));
    EXPECT_TRUE(bit_identical("att", o.att, again.att));
    EXPECT_TRUE(bit_identical("dpreatt", o.dpre, again.dpre));
#if !PIPELANE_CUDA_TEST_SANITIZER
    // The CPU op's probabilities (its own fp32 scores): the difference also holds the rounding of
    // the scores to T, ~u * |score| * scale in the exponent.
    std::vector<float> out(static_cast<std::size_t>(B) * Tn * C), catt(n);
    cpu::attention_forward(out.data(), catt.data(), to_floats(qkv).data(), B, Tn, C, NH);
    EXPECT_TRUE(matches("att vs cpu", o.att, catt, 4 * kSoftmaxNmse + 1e-12));
#endif
  }
}

TYPED_TEST(Attention, KvCache) {
  using T = TypeParam;
  struct KvShape {
    int C, NH, p0, n;
  };
  // One query at position 0; a chunk in the middle; a cache longer than one tile of keys (128);
  // head size 160 (> the block's 128 threads).
  const std::vector<KvShape> kv_shapes =
      kSanitizer
          ? std::vector<KvShape>{{8, 1, 128, 1}}  // two tiles of keys for the last query
          : std::vector<KvShape>{{8, 2, 0, 1}, {33, 3, 5, 4}, {16, 1, 128, 2}, {320, 2, 2, 2}};
  for (const auto [C, NH, p0, n] : kv_shapes) {
    SCOPED_TRACE(::testing::Message()
                 << type_name<T>() << " C=" << C << " p0=" << p0 << " n=" << n);
    std::mt19937 rng(13u * C + p0);
    const int Tall = p0 + n;  // the whole sequence: positions 0 .. p0+n-1
    const auto qkv = random_values<T>(rng, static_cast<std::size_t>(Tall) * 3 * C);
    // The cache as the prefill lane keeps it: K and V rows [Tall, C]; the chunk's queries are the
    // q parts of its qkv rows (stride 3C).
    std::vector<T> K(static_cast<std::size_t>(Tall) * C), V(K.size());
    for (int t = 0; t < Tall; ++t)
      for (int c = 0; c < C; ++c) {
        K[static_cast<std::size_t>(t) * C + c] = qkv[static_cast<std::size_t>(t) * 3 * C + C + c];
        V[static_cast<std::size_t>(t) * C + c] =
            qkv[static_cast<std::size_t>(t) * 3 * C + 2 * C + c];
      }
    const std::vector<T> chunk(qkv.begin() + static_cast<std::size_t>(p0) * 3 * C, qkv.end());
    const auto run = [&] {
      Guarded<T> out(static_cast<std::size_t>(n) * C), gq(chunk), gk(K), gv(V);
      cuda::attention_kv_cache_forward(out.data(), gq.data(), 3 * C, gk.data(), gv.data(), C, n, p0,
                                       C, NH, nullptr);
      return out;
    };
    const Guarded<T> out = run(), again = run();
    const Vec full = ref::attention(to_double(qkv), 1, Tall, C, NH);
    const Vec want(full.begin() + static_cast<std::size_t>(p0) * C, full.end());
    EXPECT_TRUE(matches("out", out, want, kKvNmse));
    EXPECT_TRUE(bit_identical("out", out, again));
#if !PIPELANE_CUDA_TEST_SANITIZER
    std::vector<float> cout(static_cast<std::size_t>(Tall) * C),
        catt(static_cast<std::size_t>(NH) * Tall * Tall);
    cpu::attention_forward(cout.data(), catt.data(), to_floats(qkv).data(), 1, Tall, C, NH);
    EXPECT_TRUE(
        matches("out vs cpu", out,
                std::vector<float>(cout.begin() + static_cast<std::size_t>(p0) * C, cout.end()),
                4 * kKvNmse));
#endif
  }
}

TEST(AttentionKvCache, RefusesHeadsOverTheLimit) {
  EXPECT_THROW(cuda::attention_kv_cache_forward<float>(nullptr, nullptr, 0, nullptr, nullptr, 0, 1,
                                                       0, 600, 2, nullptr),
               std::invalid_argument);
}

}  // namespace
}  // namespace pipelane::cuda_test::attention_test
