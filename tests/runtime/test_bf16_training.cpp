// bf16 compute (runtime/backend.h) through training: the tiny GPT of the executor tests, a few
// optimizer steps through the real PipelineExecutor on the CPU backend in bf16 against fp32, and
// split over two tensor-parallel ranks (threads; the vocab-parallel head and the row-parallel
// all-reduces in bf16) against one process.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/onednn_bf16_gemm.h"
#include "tests/cuda/executor_runs.h"

namespace pipelane::cuda_test {
namespace {

TrainRun train_cpu(DType compute, int steps, CpuBf16Gemm path = CpuBf16Gemm::Auto) {
  const auto backend = make_cpu_backend(1, compute, path);
  Topology topo = Topology::single_process(*backend);
  return train_tiny(topo, *backend, 1, steps);
}

TEST(Bf16Training, CpuLossesStayWithinFiveHundredthsOfFp32AndDiffer) {
  const TrainRun fp32 = train_cpu(DType::F32, 4), bf16 = train_cpu(DType::BF16, 4);
  ASSERT_EQ(bf16.loss.size(), fp32.loss.size());
  bool some_bit_differs = false;
  for (std::size_t s = 0; s < fp32.loss.size(); ++s) {
    EXPECT_TRUE(std::isfinite(bf16.loss[s]) && std::isfinite(bf16.grad_norm[s])) << "step " << s + 1;
    // bf16 operands move each GEMM output by up to 2^-7 of its terms' magnitude; over a few steps
    // of a 2-layer model the loss (about ln 61 = 4.1) moves by far less than PyTorch's usual
    // bf16-vs-fp32 training tolerance of 0.05 that the task sets.
    EXPECT_NEAR(bf16.loss[s], fp32.loss[s], 0.05) << "step " << s + 1;
    some_bit_differs |= std::memcmp(&bf16.loss[s], &fp32.loss[s], sizeof(double)) != 0;
    std::printf("step %zu: loss fp32 %.9f bf16 %.9f (diff %.3g), grad norm fp32 %.6f bf16 %.6f\n", s + 1,
                fp32.loss[s], bf16.loss[s], bf16.loss[s] - fp32.loss[s], fp32.grad_norm[s], bf16.grad_norm[s]);
  }
  EXPECT_TRUE(some_bit_differs) << "bf16 compute is not on: the losses equal fp32's bit for bit";
  EXPECT_LT(bf16.loss.back(), bf16.loss.front()) << "bf16 training does not train";
}

// Bound: tp 2 sums each row-parallel GEMM in two halves and all-reduces them, so the fp32 values
// that are rounded to bf16 differ from one process's in their last bits; the argument and the
// bound are tests/cuda/test_cuda_autocast.cpp's (emulated CUDA vs CPU): 1e-5 relative + 0.25 x the
// largest bf16-vs-fp32 difference of the run.
TEST(Bf16Training, TwoTensorParallelRanksMatchOneProcess) {
  const int steps = 3;
  const TrainRun fp32 = train_cpu(DType::F32, steps), want = train_cpu(DType::BF16, steps);
  const ParallelDims dims{2, 1, 1};
  std::vector<std::string> errors;
  const TrainRun got =
      train_tiny_on_threads(dims, [] { return make_cpu_backend(1, DType::BF16); }, steps, errors);
  for (int r = 0; r < dims.world(); ++r) ASSERT_EQ(errors[r], "") << "rank " << r;
  ASSERT_EQ(got.loss.size(), want.loss.size());
  const double effect = largest_difference(want.loss, fp32.loss);
  for (std::size_t s = 0; s < want.loss.size(); ++s) {
    std::printf("step %zu: loss bf16 one process %.9f, tp 2 %.9f\n", s + 1, want.loss[s], got.loss[s]);
    EXPECT_NEAR(got.loss[s], want.loss[s], 1e-5 * want.loss[s] + 0.25 * effect) << "step " << s + 1;
  }
}

// The two bf16 GEMM paths of the CPU backend round the same operands and differ only in the
// order of their fp32 sums: the same argument and bound as two ranks against one process above.
TEST(Bf16Training, OnednnAndEmulatedGemmsTrainAlike) {
  const cpu::OnednnBf16Support support = cpu::probe_onednn_bf16();
  if (!support.matmul) GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU (" << support.isa << ")";
  const int steps = 3;
  const TrainRun fp32 = train_cpu(DType::F32, steps);
  const TrainRun emulated = train_cpu(DType::BF16, steps, CpuBf16Gemm::Emulated);
  const TrainRun onednn = train_cpu(DType::BF16, steps, CpuBf16Gemm::Onednn);
  ASSERT_EQ(onednn.loss.size(), emulated.loss.size());
  const double effect = largest_difference(emulated.loss, fp32.loss);
  for (std::size_t s = 0; s < emulated.loss.size(); ++s) {
    std::printf("step %zu: loss bf16 emulated %.9f, oneDNN %.9f\n", s + 1, emulated.loss[s], onednn.loss[s]);
    EXPECT_NEAR(onednn.loss[s], emulated.loss[s], 1e-5 * emulated.loss[s] + 0.25 * effect) << "step " << s + 1;
  }
}

}  // namespace
}  // namespace pipelane::cuda_test
