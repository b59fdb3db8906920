// The CUDA backend in bf16 compute mode (runtime/backend.h; backend/cuda_backend_autocast.cpp):
// the matmul family against the double reference of bf16 compute and against the CPU backend in
// bf16 mode (tests/runtime/bf16_reference.h), on the build for the CPU (kernels emulated, the
// GEMM interpreter reading the bf16 operand copies; test_cuda_backend) and on a GPU with cuBLASLt
// (test_cuda_gpu, skipped without a device; scripts/gpu_check.sh runs it). On the emulated build
// also a tiny GPT trained in bf16 through the executor against the CPU backend in bf16.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/cpu/cpu_backend.h"
#include "tests/runtime/bf16_buffer_bits.h"
#include "tests/runtime/bf16_reference.h"
#include "tests/cuda/test_backends.h"
#if !PIPELANE_TEST_REAL_CUDA
#include "tests/cuda/executor_runs.h"
#endif

namespace pipelane::cuda_test {
namespace {

TEST(CudaAutocast, OpsMatchTheBf16ReferenceAndTheCpuBackendInBf16) {
  using namespace bf16_test;
  const Inputs in = make_inputs();
  const auto cuda = cuda_backend_for_test(DType::BF16);
  if (!cuda) GTEST_SKIP() << "no CUDA device";
  ASSERT_EQ(cuda->compute_precision(), DType::BF16);
  const auto cpu = make_cpu_backend(1, DType::BF16);
  const Outputs got = run_ops(*cuda, in), want_cpu = run_ops(*cpu, in);
  // The reference of the attention's out reads the op's own probabilities: each run's own.
  const Reference want = reference(in, got), want_for_cpu = reference(in, want_cpu);
  for (const auto& [name, t] : got.t) {
    expect_within(t, want.t.at(name), name);
    if (name != "attention.out") expect_close_to(t, want_cpu.t.at(name), want.t.at(name), name + " vs cpu");
  }
  // out over two backends' probabilities: each within its bound of its reference, and those two
  // references differ by at most the probabilities' bound times |v|, already in the att check.
  expect_within(want_cpu.t.at("attention.out"), want_for_cpu.t.at("attention.out"), "cpu attention.out");
  EXPECT_NEAR(got.head_sum, want.head_sum.value[0], want.head_sum.bound[0]);
  EXPECT_NEAR(got.head_vp_sum, want.head_sum.value[0], want.head_sum.bound[0]);
}

// The bf16 copy of the weights ([train] gemm_weights = bf16): the GEMMs read it as it is (no
// op-temporary copy) and give the bits of the fp32 weights they would have rounded; fp32 compute
// refuses it.
TEST(CudaAutocast, Bf16WeightsGiveTheBitsOfRoundedFp32Weights) {
  using namespace bf16_test;
  const auto cuda = cuda_backend_for_test(DType::BF16);
  if (!cuda) GTEST_SKIP() << "no CUDA device";
  expect_bf16_weights_change_no_bit(*cuda, make_inputs());
  const auto fp32 = cuda_backend_for_test(DType::F32);
  expect_fp32_compute_refuses_bf16_weights(*fp32);
}

// bf16 storage's probabilities written and read by the attention ops themselves, its norm outputs
// written by the norms and (bf16 compute) read by the GEMMs, its residual stream read by the norms'
// backward, its MLP activation written by GeLU and SwiGLU: the bits of the fp32 buffer's ops
// around the casts, MHA and GQA, in either compute precision.
TEST(CudaAutocast, Bf16ProbabilitiesGiveTheBitsOfTheFp32OpsAroundTheCasts) {
  for (const DType compute : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(compute));
    const auto cuda = cuda_backend_for_test(compute);
    if (!cuda) GTEST_SKIP() << "no CUDA device";
    for (const int kv_heads : {0, 2}) bf16_buffers_test::expect_bf16_probabilities_change_no_bit(*cuda, kv_heads);
    bf16_buffers_test::expect_bf16_norm_outputs_change_no_bit(*cuda);
    bf16_buffers_test::expect_bf16_norm_inputs_change_no_bit(*cuda);
    bf16_buffers_test::expect_bf16_activations_change_no_bit(*cuda);
    bf16_buffers_test::expect_bf16_activation_inputs_change_no_bit(*cuda);
    for (const int kv_heads : {0, 2}) bf16_buffers_test::expect_bf16_attention_inputs_change_no_bit(*cuda, kv_heads);
    if (compute == DType::BF16) bf16_buffers_test::expect_bf16_gemm_inputs_change_no_bit(*cuda);
  }
  // The cuDNN attention saves fp32 softmax statistics, not probabilities: no bf16 buffer for the
  // MHA ops (the model then keeps its fp32 workspace); its GQA ops are cuBLASLt's and take one.
  const auto cudnn = cuda_backend_for_test(DType::BF16, cuda::AttentionImpl::Cudnn);
  EXPECT_FALSE(cudnn->supports(OpKind::AttentionForward, DType::BF16));
  EXPECT_FALSE(cudnn->supports(OpKind::AttentionBackward, DType::BF16));
  EXPECT_TRUE(cudnn->supports(OpKind::AttentionForwardGqa, DType::BF16));
  bf16_buffers_test::Buffers b(*cudnn);
  std::uint16_t* att = b.bf16(2 * 4 * 4);
  EXPECT_THROW(cudnn->attention_forward(b.zeros(2 * 4 * 8), ActivationOut::of_bf16(att), b.zeros(2 * 4 * 24), 2, 4, 8,
                                        2, b.stream()),
               std::invalid_argument);
}

TEST(CudaAutocast, Fp32ComputeIsUnchangedByTheMode) {
  // In fp32 compute (the default) the GEMMs read fp32 operands: the outputs fall outside the bf16
  // reference's bounds.
  using namespace bf16_test;
  const Inputs in = make_inputs();
  const auto cuda = cuda_backend_for_test(DType::F32);
  if (!cuda) GTEST_SKIP() << "no CUDA device";
  EXPECT_EQ(cuda->compute_precision(), DType::F32);
  const Outputs got = run_ops(*cuda, in);
  const Reference want = reference(in, got);
  int outside = 0;
  for (std::size_t i = 0; i < got.t.at("matmul.out").size(); ++i)
    outside += std::fabs(got.t.at("matmul.out")[i] - want.t.at("matmul.out").value[i]) >
               want.t.at("matmul.out").bound[i];
  EXPECT_GT(outside, 0) << "fp32 compute rounded its operands to bf16";
}

#if !PIPELANE_TEST_REAL_CUDA
// The bound. Both runs round the same fp32 values to bf16, except where those values differ (the
// CPU's sgemm and the interpreter's double sum round differently: relative at most K u <= 2^-17
// with K <= 128 here) and a bf16 rounding midpoint lies between them: at most 2^-17 / 2^-8 = 2^-9
// of the operands on either side, 2^-8 in all. Such an operand moves by one bf16 ulp, while bf16
// rounding itself moves every operand by an error of RMS ulp / sqrt(12). Independent errors add
// in energy, so the emulated-vs-CPU difference is at most sqrt(2^-8 / (1/12)) = 0.22 of the
// bf16-vs-fp32 difference (its largest over the run, as both propagate through the same steps):
// 0.25 of it, plus the fp32 parity tests' 1e-5 relative for what differs in fp32 already (expf
// against the CPU's polynomial, GEMM rounding). This checks the emulated run `got` against the
// CPU's `want` step by step with it.
void expect_within_quarter_of_the_bf16_effect(const TrainRun& fp32, const TrainRun& want, const TrainRun& got) {
  ASSERT_EQ(got.loss.size(), want.loss.size());
  const double loss_effect = largest_difference(want.loss, fp32.loss);
  const double norm_effect = largest_difference(want.grad_norm, fp32.grad_norm);
  EXPECT_GT(loss_effect, 0.0) << "the CPU run is not in bf16";
  for (std::size_t s = 0; s < want.loss.size(); ++s) {
    std::printf("step %zu: loss cpu fp32 %.9f cpu bf16 %.9f cuda-emulated bf16 %.9f; grad norm %.7f %.7f %.7f\n",
                s + 1, fp32.loss[s], want.loss[s], got.loss[s], fp32.grad_norm[s], want.grad_norm[s],
                got.grad_norm[s]);
    EXPECT_NEAR(got.loss[s], want.loss[s], 1e-5 * want.loss[s] + 0.25 * loss_effect) << "step " << s + 1;
    EXPECT_NEAR(got.grad_norm[s], want.grad_norm[s], 1e-5 * want.grad_norm[s] + 0.25 * norm_effect)
        << "step " << s + 1;
  }
}

TEST(CudaAutocast, TrainingMatchesTheCpuBackendInBf16) {
  const int steps = 4;
  const TrainRun fp32 = train_one_process(*make_cpu_backend(1), steps);
  const TrainRun want = train_one_process(*make_cpu_backend(1, DType::BF16), steps);
  const TrainRun got = train_one_process(*cuda_backend_for_test(DType::BF16), steps);
  expect_within_quarter_of_the_bf16_effect(fp32, want, got);
}

// bf16 storage on the emulated CUDA backend (its casts are the kernels' __float2bfloat16_rn)
// against the CPU backend's: the same argument and bound as above, the effect now bf16 storage's
// (with bf16 compute) against fp32: the stored values are fp32 values the two backends computed,
// rounded to bf16 by the same rule, so they differ only where a value straddles a midpoint.
TEST(CudaAutocast, TrainingWithBf16StorageMatchesTheCpuBackend) {
  const int steps = 4;
  const TrainRun fp32 = train_one_process(*make_cpu_backend(1), steps);
  const TrainRun want = train_one_process(*make_cpu_backend(1, DType::BF16), steps, DType::BF16);
  const TrainRun autocast = train_one_process(*make_cpu_backend(1, DType::BF16), steps);
  const TrainRun got = train_one_process(*cuda_backend_for_test(DType::BF16), steps, DType::BF16);
  EXPECT_NE(want.loss, autocast.loss) << "bf16 storage is not on";
  expect_within_quarter_of_the_bf16_effect(fp32, want, got);
}

// [train] gemm_weights = bf16 through the executor on the emulated CUDA backend: the copy the
// GEMMs read (made by the cast kernel after every optimizer step) holds what their own conversion
// gave, so 4 steps keep every bit of the run without it.
TEST(CudaAutocast, Bf16GemmWeightsTrainBitIdenticallyThroughTheExecutor) {
  const int steps = 4;
  const TrainRun without = train_one_process(*cuda_backend_for_test(DType::BF16), steps, DType::BF16);
  const TrainRun with = train_one_process(*cuda_backend_for_test(DType::BF16), steps, DType::BF16, DType::BF16);
  EXPECT_EQ(with.loss, without.loss);
  EXPECT_EQ(with.grad_norm, without.grad_norm);
  EXPECT_NE(without.loss.front(), without.loss.back()) << "it does not train";
}

#endif

}  // namespace
}  // namespace pipelane::cuda_test
