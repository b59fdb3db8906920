// The ops the CUDA backend composes from own kernels and cuBLASLt GEMMs, run here with the
// kernels emulated and the GEMMs interpreted (runtime/cuda/emu/gemm_interpreter.h), against the CPU ops
// they must replace: causal attention forward and backward (permute, QK^T, softmax, AV,
// unpermute) and the fused LM head with cross-entropy, chunk by chunk. This checks the wiring:
// which buffer goes where, in which layout, with which scale.
// fp32 NMSE limit 1e-10: both sides sum over hs, T or C in fp32 and differ in order (a few ulp
// each, NMSE ~1e-13), and the CPU's exp is a polynomial. bf16: inputs rounded to bf16 for both;
// the composed path also rounds its intermediates (preatt, att, logits) to bf16: NMSE 1e-4 and
// llm.c's elementwise test.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/cuda/kernels/attention.cuh"
#include "runtime/cuda/kernels/cross_entropy.cuh"
#include "runtime/cuda/plans/gemm_plan.h"
#include "runtime/cpu/cpu_ops.h"
#include "runtime/cuda/emu/gemm_interpreter.h"
#include "tests/cuda/kernel_check.h"

// A namespace of its own: the emulated test executables are unity builds.
namespace pipelane::cuda_test::composed_test {
namespace {

using cuda_emu::run_gemm;

constexpr double kComposedNmse = 1e-10;

template <typename T>
constexpr cuda::DataType data_type() {
  return std::is_same_v<T, bf16> ? cuda::DataType::BF16 : cuda::DataType::F32;
}

template <typename T>
class Composed : public ::testing::Test {};
TYPED_TEST_SUITE(Composed, StorageTypes);

TYPED_TEST(Composed, AttentionForwardAndBackward) {
  using T = TypeParam;
  constexpr cuda::DataType dt = data_type<T>();
  struct Shape {
    int B, T, C, NH;
  };
  for (const auto [B, Tn, C, NH] : {Shape{2, 5, 12, 3}, Shape{1, 1, 8, 2}, Shape{2, 33, 16, 2}}) {
    SCOPED_TRACE(::testing::Message() << type_name<T>() << " B=" << B << " T=" << Tn << " C=" << C);
    std::mt19937 rng(5u * C + Tn);
    const int hs = C / NH, BNH = B * NH;
    const std::size_t n = static_cast<std::size_t>(B) * Tn * C,
                      na = static_cast<std::size_t>(BNH) * Tn * Tn;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    const auto qkv = random_values<T>(rng, 3 * n), dout = random_values<T>(rng, n);
    Guarded<T> gqkv(qkv), gdout(dout), q(n), k(n), v(n), preatt(na), att(na), y(n), out(n);
    cuda::attention_permute_qkv(q.data(), k.data(), v.data(), gqkv.data(), B, Tn, C, NH, nullptr);
    run_gemm(cuda::attention_scores_gemm(preatt.data(), q.data(), k.data(), BNH, Tn, hs, dt));
    cuda::attention_softmax_forward(att.data(), preatt.data(), scale, BNH, Tn, nullptr);
    run_gemm(cuda::attention_values_gemm(y.data(), att.data(), v.data(), BNH, Tn, hs, dt));
    cuda::attention_unpermute(out.data(), y.data(), B, Tn, C, NH, nullptr);

    Guarded<T> dy(n), datt(na), dv(n), dq(n), dk(n), dqkv(3 * n);
    cuda::attention_unpermute_backward(dy.data(), gdout.data(), B, Tn, C, NH, nullptr);
    for (const auto& g : cuda::attention_values_backward_gemms(
             datt.data(), dv.data(), dy.data(), att.data(), v.data(), BNH, Tn, hs, dt))
      run_gemm(g);
    cuda::attention_softmax_backward(datt.data(), datt.data(), att.data(), scale, BNH, Tn, nullptr);
    for (const auto& g : cuda::attention_scores_backward_gemms(dq.data(), dk.data(), datt.data(),
                                                               q.data(), k.data(), BNH, Tn, hs, dt))
      run_gemm(g);
    cuda::attention_permute_qkv_backward(dqkv.data(), dq.data(), dk.data(), dv.data(), B, Tn, C, NH,
                                         nullptr);

    std::vector<float> cout(n), catt(na), cdqkv(3 * n);
    const auto fqkv = to_floats(qkv);
    cpu::attention_forward(cout.data(), catt.data(), fqkv.data(), B, Tn, C, NH);
    cpu::attention_backward(cdqkv.data(), to_floats(dout).data(), fqkv.data(), catt.data(), B, Tn,
                            C, NH);
    EXPECT_TRUE(matches("out", out, cout, kComposedNmse));
    EXPECT_TRUE(matches("att", att, catt, kComposedNmse));
    EXPECT_TRUE(matches("dqkv", dqkv, cdqkv, kComposedNmse));
  }
}

// The fused head over chunks of rows: logits = x @ wte^T (GEMM), cross_entropy_chunk (kernel),
// dx = dlogits @ wte and dwte += dlogits^T @ x (GEMMs).
TYPED_TEST(Composed, LmHeadCrossEntropy) {
  using T = TypeParam;
  constexpr cuda::DataType dt = data_type<T>();
  const int N = 7, C = 12, V = 301, Vp = 320, chunk = 3;  // a partial last chunk
  std::mt19937 rng(23);
  const auto x = random_values<T>(rng, static_cast<std::size_t>(N) * C);
  const auto wte = random_values<T>(rng, static_cast<std::size_t>(Vp) * C);
  const auto dwte0 = random_values<float>(rng, static_cast<std::size_t>(Vp) * C);
  std::uniform_int_distribution<int> tok(0, V - 1);
  std::vector<std::int32_t> targets(N);
  for (auto& t : targets) t = tok(rng);
  const float grad_scale = 1.0f / N;
  Guarded<T> gx(x), gwte(wte), dx(static_cast<std::size_t>(N) * C),
      logits(static_cast<std::size_t>(chunk) * Vp);
  Guarded<float> losses(N), dwte(dwte0);
  Guarded<std::int32_t> gt(targets);
  for (int r0 = 0; r0 < N; r0 += chunk) {
    const int rows = std::min(chunk, N - r0);
    const T* xc = gx.data() + static_cast<std::size_t>(r0) * C;
    run_gemm(cuda::matmul_forward_gemm(logits.data(), xc, gwte.data(), nullptr, rows, C, Vp, dt));
    cuda::cross_entropy_chunk(losses.data() + r0, logits.data(), gt.data() + r0, rows, V, Vp,
                              grad_scale, true, nullptr);
    run_gemm(cuda::matmul_backward_input_gemm(dx.data() + static_cast<std::size_t>(r0) * C,
                                              logits.data(), gwte.data(), rows, C, Vp, dt));
    run_gemm(cuda::matmul_backward_weight_gemm(dwte.data(), logits.data(), xc, rows, C, Vp, dt));
  }
  std::vector<float> closses(N), cdx(static_cast<std::size_t>(N) * C), cdwte = dwte0;
  std::vector<float> scratch(static_cast<std::size_t>(cpu::lm_head_chunk_rows(N, Vp)) * Vp);
  cpu::lm_head_cross_entropy(closses.data(), cdx.data(), cdwte.data(), to_floats(x).data(),
                             to_floats(wte).data(), targets.data(), N, C, V, Vp, grad_scale,
                             scratch.data());
  // bf16: the logits and dlogits are rounded to bf16 on this path only.
  const double limit = dt == cuda::DataType::BF16 ? kBf16Nmse : kComposedNmse;
  EXPECT_TRUE(matches("losses", losses, closses, limit));
  EXPECT_TRUE(matches("dx", dx, cdx, kComposedNmse));
  EXPECT_TRUE(matches("dwte", dwte, cdwte, limit));
}

}  // namespace
}  // namespace pipelane::cuda_test::composed_test
