// Sequence parallelism through the executor (a tp x dp x pp job as threads of this process), GPT-2
// and Llama, against tensor parallelism alone on the same grid: the stage-to-stage messages hold
// each tp rank's rows only, the norms' gradients are summed over tp once a step before the
// data-parallel sync, and training follows tp alone.
//
// Tolerance: the first step's loss is bit-identical (the forward makes the same float operations,
// tests/model/test_sequence_parallel.cpp); the norms' gradients are reassociated sums (partial
// sums per rank, then over the ranks), within a few ulps of tp alone's, and everything after
// them inherits that. 1e-5 relative to each quantity's scale is the bound. Measured
// here: losses and gradient norms within 4e-8, final gradients within 3e-7; the parameters
// within 5.2e-6 of the largest one (GPT-2) - AdamW divides each gradient by its own RMS, so a
// norm-gradient element that nearly cancels (its rounding difference is relative to the terms'
// magnitudes, not to the small sum) moves its update by much more than its own relative error.
// With sequence parallelism on, full recomputation stays bit-identical, and the arena's
// high-water mark drops and is exactly what the memory model predicted.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "tests/parallel/threaded_executor_job.h"

namespace pipelane {
namespace {

using threaded_job::JobOut;

constexpr int kSteps = 3;  // threaded_job::tiny_job's sizes otherwise
constexpr double kTol = 1e-5;  // see the header


struct Case {
  const char* name;
  ParallelDims dims;  // tp, dp, pp
  ScheduleKind kind;
  int v;
  ModelArch arch;
  bool distributed_optimizer;
  friend void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }
};

JobOut run_job(const Case& c, bool sp, RecomputeOptions rc = {}) {
  threaded_job::JobSpec s = threaded_job::tiny_job(c.dims, c.kind, c.v, c.arch);
  s.options.recompute = rc;
  s.options.sequence_parallel = sp;
  s.options.distributed_optimizer = c.distributed_optimizer;
  s.steps = kSteps;
  return threaded_job::run(s);
}

// max |a - b| / max |b|
double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

class ExecutorSequenceParallel : public ::testing::TestWithParam<Case> {};

TEST_P(ExecutorSequenceParallel, TrainsAsTensorParallelAloneInLessMemory) {
  const Case& c = GetParam();
  const JobOut alone = run_job(c, false), sp = run_job(c, true);
  ASSERT_EQ(alone.loss.size(), static_cast<std::size_t>(kSteps));
  ASSERT_EQ(sp.loss.size(), static_cast<std::size_t>(kSteps));
  EXPECT_NE(alone.loss.front(), alone.loss.back());  // it trains
  EXPECT_EQ(sp.loss.front(), alone.loss.front()) << "the first step's forward is bit-identical";
  double worst = 0;
  for (int s = 0; s < kSteps; ++s) {
    worst = std::max(worst, std::fabs(sp.loss[s] - alone.loss[s]) / std::fabs(alone.loss[s]));
    worst = std::max(worst, std::fabs(sp.grad_norm[s] - alone.grad_norm[s]) / alone.grad_norm[s]);
  }
  EXPECT_LE(worst, kTol) << c.name << ": losses and gradient norms";
  for (int r = 0; r < c.dims.world(); ++r) {
    const double g = rel_err(sp.ranks[r].grads, alone.ranks[r].grads), p = rel_err(sp.ranks[r].params, alone.ranks[r].params);
    EXPECT_LE(g, kTol) << c.name << " rank " << r << " gradients";
    EXPECT_LE(p, kTol) << c.name << " rank " << r << " parameters";
    worst = std::max({worst, g, p});
    EXPECT_LT(sp.ranks[r].high_water, alone.ranks[r].high_water) << c.name << " rank " << r;
    EXPECT_EQ(sp.ranks[r].high_water, sp.ranks[r].predicted) << c.name << " rank " << r;
  }
  std::printf("[ %s ] sequence parallel vs tp alone, %d steps: max relative error %.3g; rank 0's arena %zu -> %zu bytes\n",
              c.name, kSteps, worst, alone.ranks[0].high_water, sp.ranks[0].high_water);
}

const Case kCases[] = {
    {"tp2_pp2_1f1b_gpt2", {2, 1, 2}, ScheduleKind::OneFOneB, 1, ModelArch::Gpt2, false},
    {"tp2_pp2_zbh1_llama", {2, 1, 2}, ScheduleKind::ZeroBubbleH1, 1, ModelArch::Llama, false},
    {"tp2_pp2_interleaved_gpt2", {2, 1, 2}, ScheduleKind::Interleaved, 2, ModelArch::Gpt2, false},
    {"tp2_dp2_1f1b_llama_zero1", {2, 2, 1}, ScheduleKind::OneFOneB, 1, ModelArch::Llama, true},
};
INSTANTIATE_TEST_SUITE_P(Grids, ExecutorSequenceParallel, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// Recomputation with sequence parallelism on: bit-identical to none, as without it.
TEST(ExecutorSequenceParallelRecompute, FullRecomputeIsBitIdentical) {
  const Case c{"tp2_pp2_zbh1_gpt2", {2, 1, 2}, ScheduleKind::ZeroBubbleH1, 1, ModelArch::Gpt2, false};
  const JobOut none = run_job(c, true);
  for (const RecomputeOptions& rc : {RecomputeOptions{RecomputeKind::Full, RecomputeMethod::Uniform, 2},
                                     RecomputeOptions{RecomputeKind::Selective, RecomputeMethod::Uniform, 1}}) {
    const JobOut got = run_job(c, true, rc);
    EXPECT_EQ(got.loss, none.loss) << describe(rc);
    EXPECT_EQ(got.grad_norm, none.grad_norm) << describe(rc);
    for (int r = 0; r < c.dims.world(); ++r) {
      EXPECT_TRUE(got.ranks[r].params == none.ranks[r].params) << describe(rc) << " rank " << r;
      EXPECT_TRUE(got.ranks[r].grads == none.ranks[r].grads) << describe(rc) << " rank " << r;
      EXPECT_LT(got.ranks[r].high_water, none.ranks[r].high_water) << describe(rc) << " rank " << r;
    }
  }
}

// The memory model with sequence parallelism, for one layer of a GPT-2-medium-like model (s 1024,
// b 1, h 1024, a 16) at tp 4, 16 bits. Pipelane's layer keeps (elements, N = s*b tokens): the
// norms' outputs and the residual adds 4*N*h plus 4*N norm statistics (split by t only with
// sequence parallelism), q/k/v, the attention output and the MLP's two 4h-wide tensors 12*N*h/t,
// the attention probabilities a*s*s*b/t. So with sequence parallelism everything is /t, as in
// Korthikanti et al.'s table (34 -> 34/t), and pipelane's count is
// (32*s*b*h + 8*s*b + 2*a*s*s*b)/t bytes: no dropout masks (2 of the 34, 3 of the 5), its own
// norm statistics (tests/parallel/test_executor_recompute.cpp derives the tp = 1 count).
TEST(MemoryModel, SequenceParallelDividesEveryActivationByTp) {
  const std::unique_ptr<Backend> cpu = make_cpu_backend(1);
  MemorySpec spec;
  spec.model.layers = 24;
  spec.model.d_model = 1024;
  spec.model.heads = 16;
  spec.model.max_seq_len = 1024;
  spec.model.vocab_size = 50257;
  spec.seq_len = 1024;
  spec.element_bytes = 2;
  spec.tp = 4;
  const double s = 1024, b = 1, h = 1024, a = 16, t = 4;
  const double tp_alone = layer_activation_bytes(spec, *cpu);
  EXPECT_DOUBLE_EQ(tp_alone, 8 * s * b * h + 8 * s * b + (24 * s * b * h + 2 * a * s * s * b) / t);
  spec.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(spec, *cpu), (32 * s * b * h + 8 * s * b + 2 * a * s * s * b) / t);
  EXPECT_DOUBLE_EQ(korthikanti_layer_activation_bytes(spec), s * b * h * (34 / t + 5 * a * s / (h * t)));
  spec.recompute.kind = RecomputeKind::Selective;
  EXPECT_DOUBLE_EQ(korthikanti_layer_activation_bytes(spec), s * b * h * 34 / t);
  spec.recompute.kind = RecomputeKind::Full;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(spec, *cpu), 2 * s * b * h / t);  // the layer's input: its rows
  EXPECT_DOUBLE_EQ(korthikanti_layer_activation_bytes(spec), 2 * s * b * h / t);
  // A stage's messages hold this rank's rows; a rank's whole prediction shrinks.
  spec.recompute.kind = RecomputeKind::None;
  spec.schedule = {ScheduleKind::OneFOneB, 2, 1, 4};
  spec.element_bytes = 4;
  const RankMemory with = predict_rank_memory(spec, 0, 0, *cpu);
  spec.sequence_parallel = false;
  const RankMemory without = predict_rank_memory(spec, 0, 0, *cpu);
  EXPECT_DOUBLE_EQ(with.messages, without.messages / t);
  EXPECT_LT(with.activations, without.activations);
  EXPECT_EQ(with.model_states(), without.model_states());
  // Refused: sequence parallelism without tp, or rows that do not split.
  spec.sequence_parallel = true;
  spec.tp = 1;
  EXPECT_THROW(predict_rank_memory(spec, 0, 0, *cpu), std::invalid_argument);
  spec.tp = 4;
  spec.seq_len = 1022;
  spec.micro_batch = 1;
  EXPECT_THROW(predict_rank_memory(spec, 0, 0, *cpu), std::invalid_argument);
}

}  // namespace
}  // namespace pipelane
