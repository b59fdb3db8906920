// Emulated softmax cross-entropy over a chunk of logits (the fused LM head's own kernel), whole
// and vocab-parallel, fp32 and bf16, against the double reference and the CPU fused head.
// fp32 NMSE limits: losses 1e-12 (log of a sum of V exps: per-thread partials over V/256 terms,
// then a tree; a few ulp of the loss); dlogits 1e-11 (each is exp * 1/sum * scale: a few ulp, and
// the target column's difference). Against the CPU head the logits themselves differ by the
// rounding of x @ wte^T: 1e-10.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "runtime/cuda/kernels/cross_entropy.cuh"
#include "tests/cuda/kernel_check.h"
#include "tests/runtime/reference_ops.h"
#if !PIPELANE_CUDA_TEST_SANITIZER
#include "runtime/cpu/cpu_ops.h"
#endif

// A namespace of its own: the emulated test executables are unity builds.
namespace pipelane::cuda_test::cross_entropy_test {
namespace {

constexpr double kLossNmse = 1e-12;
constexpr double kDlogitsNmse = 1e-11;
constexpr double kVsCpuNmse = 1e-10;

struct Shape {
  int rows, C, V, Vp;
};
// V and Vp not multiples of the block (256 threads), a single row, rows longer than the block.
std::vector<Shape> shapes() {
  if (kSanitizer) return {{2, 8, 61, 64}};
  return {{5, 16, 301, 320}, {1, 8, 50, 64}, {3, 12, 700, 768}};
}

// Losses and dlogits of softmax cross-entropy over the first V of Vp columns, in double.
void reference(const Vec& logits, const std::vector<std::int32_t>& targets, int rows, int V, int Vp,
               double grad_scale, Vec& losses, Vec& dlogits) {
  losses.assign(rows, 0.0);
  dlogits.assign(static_cast<std::size_t>(rows) * Vp, 0.0);
  for (int r = 0; r < rows; ++r) {
    const double* z = logits.data() + static_cast<std::size_t>(r) * Vp;
    const double m = *std::max_element(z, z + V);
    double s = 0.0;
    for (int v = 0; v < V; ++v) s += std::exp(z[v] - m);
    losses[r] = std::log(s) - (z[targets[r]] - m);
    for (int v = 0; v < V; ++v)
      dlogits[static_cast<std::size_t>(r) * Vp + v] =
          grad_scale * (std::exp(z[v] - m) / s - (v == targets[r] ? 1.0 : 0.0));
  }
}

template <typename T>
class CrossEntropy : public ::testing::Test {};
TYPED_TEST_SUITE(CrossEntropy, StorageTypes);

TYPED_TEST(CrossEntropy, Chunk) {
  using T = TypeParam;
  for (const auto [rows, C, V, Vp] : shapes()) {
    SCOPED_TRACE(::testing::Message()
                 << type_name<T>() << " rows=" << rows << " V=" << V << " Vp=" << Vp);
    std::mt19937 rng(17u * V + rows);
    const auto x = random_values<float>(rng, static_cast<std::size_t>(rows) * C);
    const auto wte = random_values<float>(rng, static_cast<std::size_t>(Vp) * C);
    std::uniform_int_distribution<int> tok(0, V - 1);
    std::vector<std::int32_t> targets(rows);
    for (auto& t : targets) t = tok(rng);
    targets[0] = V - 1;
    const Vec exact = ref::lm_head_logits(to_double(x), to_double(wte), rows, C, Vp);
    std::vector<T> logits(exact.size());
    for (std::size_t i = 0; i < exact.size(); ++i)
      logits[i] = from_float<T>(static_cast<float>(exact[i]));
    const float grad_scale = 0.25f;
    struct Out {
      Guarded<float> losses;
      Guarded<T> dlogits;
      Guarded<float> losses_fwd;
      Guarded<T> untouched;
    };
    const auto run = [&] {
      Out o{Guarded<float>(rows), Guarded<T>(logits), Guarded<float>(rows), Guarded<T>(logits)};
      Guarded<std::int32_t> gt(targets);
      cuda::cross_entropy_chunk(o.losses.data(), o.dlogits.data(), gt.data(), rows, V, Vp,
                                grad_scale, true, nullptr);
      cuda::cross_entropy_chunk(o.losses_fwd.data(), o.untouched.data(), gt.data(), rows, V, Vp,
                                grad_scale, false, nullptr);
      return o;
    };
    const Out o = run(), again = run();
    Vec losses, dlogits;
    reference(to_double(logits), targets, rows, V, Vp, grad_scale, losses, dlogits);
    EXPECT_TRUE(matches("losses", o.losses, losses, kLossNmse));
    EXPECT_TRUE(matches("dlogits", o.dlogits, dlogits, kDlogitsNmse));
    EXPECT_TRUE(bit_identical("forward-only losses", o.losses, o.losses_fwd));
    EXPECT_TRUE(matches("forward leaves logits", o.untouched, to_double(logits), 0.0));
    EXPECT_TRUE(bit_identical("losses", o.losses, again.losses));
    EXPECT_TRUE(bit_identical("dlogits", o.dlogits, again.dlogits));
#if !PIPELANE_CUDA_TEST_SANITIZER
    std::vector<float> closses(rows),
        scratch(static_cast<std::size_t>(cpu::lm_head_chunk_rows(rows, Vp)) * Vp);
    cpu::lm_head_cross_entropy(closses.data(), nullptr, nullptr, x.data(), wte.data(),
                               targets.data(), rows, C, V, Vp, grad_scale, scratch.data());
    // bf16: the kernel's logits are the CPU's rounded to bf16 (2^-9 relative).
    EXPECT_TRUE(matches("losses vs cpu", o.losses, closses,
                        std::is_same_v<T, bf16> ? kBf16Nmse : kVsCpuNmse));
#endif
  }
}

// Two "ranks" hold column blocks [0, Vl) and [Vl, 2 Vl); the host stands in for the all-reduces.
TYPED_TEST(CrossEntropy, VocabParallel) {
  using T = TypeParam;
  for (const auto [rows, C, V, Vp] : shapes()) {
    SCOPED_TRACE(::testing::Message() << type_name<T>() << " rows=" << rows << " V=" << V);
    std::mt19937 rng(19u * V + rows);
    const int Vl = Vp / 2;
    auto logits = random_values<T>(rng, static_cast<std::size_t>(rows) * Vp, 3.0f);
    std::uniform_int_distribution<int> tok(0, V - 1);
    std::vector<std::int32_t> targets(rows);
    for (auto& t : targets) t = tok(rng);
    targets[0] = 0;                    // on rank 0
    if (rows > 1) targets[1] = V - 1;  // on rank 1
    const float grad_scale = 2.0f;
    std::vector<Guarded<T>> block;
    for (int rank = 0; rank < 2; ++rank) {
      std::vector<T> b(static_cast<std::size_t>(rows) * Vl);
      for (int r = 0; r < rows; ++r)
        std::copy_n(logits.begin() + static_cast<std::size_t>(r) * Vp + rank * Vl, Vl,
                    b.begin() + static_cast<std::size_t>(r) * Vl);
      block.emplace_back(b);
    }
    Guarded<std::int32_t> gt(targets);
    std::vector<float> rowmax(rows, -INFINITY), rowsum(rows, 0.f), rowtgt(rows, 0.f);
    for (int rank = 0; rank < 2; ++rank) {
      Guarded<float> m(rows);
      const int valid = std::clamp(V - rank * Vl, 0, Vl);
      cuda::cross_entropy_chunk_row_max(m.data(), block[rank].data(), rows, Vl, valid, nullptr);
      for (int r = 0; r < rows; ++r) rowmax[r] = std::max(rowmax[r], m.data()[r]);
    }
    Guarded<float> gmax(rowmax);
    for (int rank = 0; rank < 2; ++rank) {
      Guarded<float> s(rows), t(rows);
      const int valid = std::clamp(V - rank * Vl, 0, Vl);
      cuda::cross_entropy_chunk_row_sums(s.data(), t.data(), block[rank].data(), gmax.data(),
                                         gt.data(), rows, Vl, valid, rank * Vl, nullptr);
      for (int r = 0; r < rows; ++r) {
        rowsum[r] += s.data()[r];
        rowtgt[r] += t.data()[r];
      }
    }
    Guarded<float> gsum(rowsum), gtgt(rowtgt);
    std::vector<Guarded<float>> losses;
    for (int rank = 0; rank < 2; ++rank) {
      losses.emplace_back(rows);
      const int valid = std::clamp(V - rank * Vl, 0, Vl);
      cuda::cross_entropy_chunk_finish(losses[rank].data(), block[rank].data(), gmax.data(),
                                       gsum.data(), gtgt.data(), gt.data(), rows, Vl, valid,
                                       rank * Vl, grad_scale, true, nullptr);
    }
    Vec want_losses, want_dlogits;
    reference(to_double(logits), targets, rows, V, Vp, grad_scale, want_losses, want_dlogits);
    EXPECT_TRUE(matches("losses rank 0", losses[0], want_losses, kLossNmse));
    EXPECT_TRUE(bit_identical("losses ranks 0/1", losses[0], losses[1]));
    for (int rank = 0; rank < 2; ++rank) {
      Vec want(static_cast<std::size_t>(rows) * Vl);
      for (int r = 0; r < rows; ++r)
        for (int v = 0; v < Vl; ++v)
          want[static_cast<std::size_t>(r) * Vl + v] =
              want_dlogits[static_cast<std::size_t>(r) * Vp + rank * Vl + v];
      EXPECT_TRUE(matches("dlogits rank " + std::to_string(rank), block[rank], want, kDlogitsNmse));
    }
  }
}

}  // namespace
}  // namespace pipelane::cuda_test::cross_entropy_test
