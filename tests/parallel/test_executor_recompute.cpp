// Activation recomputation through the executor (a tp x dp x pp job as threads of this process):
// with every schedule (the zero-bubble split backward included), tp, pp, dp, and a gap filler
// that computes in every wait (as lanes do), recompute = selective and full (uniform and block)
// train bit-identically to recompute = none: the same losses, gradient norms, final gradients
// and parameters. The arena's high-water mark drops, and the memory model predicted it.
#include <gtest/gtest.h>

#include <string>

#include "tests/parallel/threaded_executor_job.h"

namespace pipelane {
namespace {

using threaded_job::JobOut;

using threaded_job::tiny_gpt;

// threaded_job::tiny_job's sizes.
constexpr int kMicroBatch = 2, kSeq = 16, kGlobalMicrobatches = 4, kSteps = 2;

JobOut run_job(ParallelDims dims, ScheduleKind kind, int v, RecomputeOptions rc, bool filler_on) {
  threaded_job::JobSpec s = threaded_job::tiny_job(dims, kind, v);
  s.options.recompute = rc;
  s.filler = filler_on;
  return threaded_job::run(s);
}

struct Case {
  const char* name;
  ParallelDims dims;
  ScheduleKind kind;
  int v;
  bool filler;
  friend void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }
};

class ExecutorRecompute : public ::testing::TestWithParam<Case> {};

TEST_P(ExecutorRecompute, BitIdenticalToNoneAndSmaller) {
  const Case& c = GetParam();
  const JobOut none = run_job(c.dims, c.kind, c.v, {}, false);  // the reference: no recompute, no lanes
  ASSERT_EQ(none.loss.size(), static_cast<std::size_t>(kSteps));
  EXPECT_NE(none.loss.front(), none.loss.back());  // it trains
  const RecomputeOptions kinds[] = {{RecomputeKind::Selective, RecomputeMethod::Uniform, 1},
                                    {RecomputeKind::Full, RecomputeMethod::Uniform, 1},
                                    {RecomputeKind::Full, RecomputeMethod::Block, 1}};
  for (const RecomputeOptions& rc : kinds) {
    const std::string what = std::string(c.name) + " " + describe(rc);
    const JobOut got = run_job(c.dims, c.kind, c.v, rc, c.filler);
    EXPECT_EQ(got.loss, none.loss) << what;  // exact
    EXPECT_EQ(got.grad_norm, none.grad_norm) << what;
    if (c.filler) {
      EXPECT_GT(got.filler_steps, 0) << what;
    }
    for (int r = 0; r < c.dims.world(); ++r) {
      EXPECT_TRUE(got.ranks[r].params == none.ranks[r].params) << what << " rank " << r << " parameters";
      EXPECT_TRUE(got.ranks[r].grads == none.ranks[r].grads) << what << " rank " << r << " gradients";
      // Less memory, except block on a chunk holding one microbatch: its one recomputed layer's
      // buffers move into the workspace, which also holds the output it keeps (one [B*T, C] more
      // a chunk at most).
      const std::size_t one_output = kMicroBatch * kSeq * 32 * sizeof(float);
      if (rc.method != RecomputeMethod::Block || none.ranks[r].min_in_flight > 1) {
        EXPECT_LT(got.ranks[r].high_water, none.ranks[r].high_water) << what << " rank " << r;
      } else {
        EXPECT_LE(got.ranks[r].high_water, none.ranks[r].high_water + c.v * one_output) << what << " rank " << r;
      }
      // The memory model sized the arena; what was carved out of it is exactly that (fp32 layout).
      EXPECT_EQ(got.ranks[r].high_water, got.ranks[r].predicted) << what << " rank " << r;
    }
  }
}

const Case kCases[] = {
    {"pp2_1f1b", {1, 1, 2}, ScheduleKind::OneFOneB, 1, false},
    {"pp2_gpipe", {1, 1, 2}, ScheduleKind::GPipe, 1, false},
    {"pp2_zbh1", {1, 1, 2}, ScheduleKind::ZeroBubbleH1, 1, false},
    {"pp2_interleaved", {1, 1, 2}, ScheduleKind::Interleaved, 2, false},
    {"tp2_pp2_zbh1", {2, 1, 2}, ScheduleKind::ZeroBubbleH1, 1, false},
    {"dp2_tp2", {2, 2, 1}, ScheduleKind::OneFOneB, 1, false},
    {"pp2_1f1b_lanes", {1, 1, 2}, ScheduleKind::OneFOneB, 1, true},
    {"pp2_zbh1_lanes", {1, 1, 2}, ScheduleKind::ZeroBubbleH1, 1, true},
};
INSTANTIATE_TEST_SUITE_P(Grids, ExecutorRecompute, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// The memory model on its own: categories that add up to what the executor carves out, the
// schedule's in-flight bound, 16-bit storage, and Korthikanti et al.'s formula.
TEST(MemoryModel, CategoriesScheduleStorageAndTheFormula) {
  const std::unique_ptr<Backend> cpu = make_cpu_backend(1);
  MemorySpec spec;
  spec.model = tiny_gpt();
  spec.schedule = {ScheduleKind::GPipe, 2, 1, 4};
  spec.micro_batch = kMicroBatch;
  spec.seq_len = kSeq;
  const RankMemory gpipe = predict_rank_memory(spec, 0, 0, *cpu);
  ASSERT_EQ(gpipe.chunks.size(), 1u);
  EXPECT_EQ(gpipe.chunks[0].in_flight, 4);  // GPipe holds every microbatch
  const double P = gpipe.chunks[0].parameters;
  EXPECT_EQ(gpipe.weights, 4 * P);
  EXPECT_EQ(gpipe.gradients, 4 * P);
  EXPECT_EQ(gpipe.optimizer, 8 * P);
  EXPECT_EQ(gpipe.master_weights, 0.0);
  EXPECT_EQ(gpipe.activations, 4 * gpipe.chunks[0].activation_bytes);
  EXPECT_EQ(gpipe.messages, 4 * 3 * double(kMicroBatch * kSeq * 32 * 4));  // aligned already
  spec.schedule.kind = ScheduleKind::OneFOneB;
  const RankMemory one_f_one_b = predict_rank_memory(spec, 0, 0, *cpu);
  EXPECT_EQ(one_f_one_b.chunks[0].in_flight, 2);  // 1F1B: p - r on stage 0
  spec.element_bytes = 2;  // the same 16 bytes a parameter (2 + 4 master + 2 + 8), half the activations
  const RankMemory half = predict_rank_memory(spec, 0, 0, *cpu);
  EXPECT_EQ(half.model_states(), one_f_one_b.model_states());
  EXPECT_EQ(half.activations, one_f_one_b.activations / 2);
  spec.element_bytes = 4;
  // Korthikanti: s*b*h*(34 + 5*a*s/h) at tp 1; 34*s*b*h selective; 2*s*b*h full.
  const double sbh = double(kSeq) * kMicroBatch * 32;
  EXPECT_DOUBLE_EQ(korthikanti_layer_activation_bytes(spec), sbh * (34 + 5.0 * 4 * kSeq / 32));
  spec.recompute.kind = RecomputeKind::Selective;
  EXPECT_DOUBLE_EQ(korthikanti_layer_activation_bytes(spec), 34 * sbh);
  spec.tp = 2;  // tensor parallelism alone: 10 of the 34 stay whole
  EXPECT_DOUBLE_EQ(korthikanti_layer_activation_bytes(spec), sbh * (10 + 12));
  EXPECT_THROW(predict_rank_memory(spec, 2, 0, *cpu), std::invalid_argument);
}

// One GPT-2 XL layer (s 1024, b 1, h 1600, a 25) in pipelane's layout at 16 bits against
// Korthikanti et al.'s count, with the difference derived: pipelane has no dropout, so it keeps
// neither the two dropout masks of the 34 (attention output and MLP: s*b*h bytes each) nor the
// attention's dropout mask and output (3*a*s*s*b of the 5); it keeps each norm's mean and rstd
// (4 numbers a token, here at 2 bytes), which the formula leaves out.
TEST(MemoryModel, OneLayerAgainstKorthikanti) {
  const std::unique_ptr<Backend> cpu = make_cpu_backend(1);
  MemorySpec spec;
  spec.model.layers = 48;
  spec.model.d_model = 1600;
  spec.model.heads = 25;
  spec.model.max_seq_len = 1024;
  spec.model.vocab_size = 50257;
  spec.seq_len = 1024;
  spec.element_bytes = 2;
  const double s = 1024, b = 1, h = 1600, a = 25, per_token_stats = 4 * 2 * s * b;
  const double none = layer_activation_bytes(spec, *cpu);
  EXPECT_DOUBLE_EQ(korthikanti_layer_activation_bytes(spec), s * b * h * (34 + 5 * a * s / h));
  EXPECT_DOUBLE_EQ(none, s * b * h * (34 - 2) + per_token_stats + (5 - 3) * a * s * s * b);
  spec.recompute.kind = RecomputeKind::Selective;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(spec, *cpu), s * b * h * (34 - 2) + per_token_stats);
  EXPECT_DOUBLE_EQ(korthikanti_layer_activation_bytes(spec), 34 * s * b * h);
  spec.recompute.kind = RecomputeKind::Full;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(spec, *cpu), 2 * s * b * h);  // the layer's input, as the formula
  EXPECT_DOUBLE_EQ(korthikanti_layer_activation_bytes(spec), 2 * s * b * h);
}

// The features a run header and the simulator's messages name: only those that change memory.
TEST(MemoryModel, DescribesTheFeaturesOnlyWhereTheyAreOn) {
  MemorySpec spec;
  spec.model = tiny_gpt();
  EXPECT_EQ(describe_memory_features(spec), "");
  spec.sequence_parallel = true;  // at tp 1: nothing is split
  spec.optimizer_shards = 1;
  EXPECT_EQ(describe_memory_features(spec), "");
  spec.tp = 2;
  spec.optimizer_shards = 4;
  spec.recompute = {RecomputeKind::Selective};
  spec.storage = DType::BF16;
  spec.gemm_weights = DType::BF16;
  EXPECT_EQ(describe_memory_features(spec),
            "recompute selective, distributed optimizer over dp 4, sequence parallel, bf16 storage (activations and "
            "messages), bf16 GEMM weights");
}

}  // namespace
}  // namespace pipelane
