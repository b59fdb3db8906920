// Sequence parallelism (GptStage's sequence_parallel) against tensor parallelism alone, ranks as
// threads (thread_tp_comm.h), for GPT-2 and a Llama (RMSNorm, RoPE, SwiGLU, grouped-query
// attention), two microbatches through a two-stage pipeline run stage after stage (the first
// with the embedding, the second with the head), the stage-to-stage messages being each rank's
// rows only.
//
// What must hold, and why:
// - losses, every non-norm gradient and every input gradient are bit-identical to tp alone: every
//   row goes through the same row-wise kernels on the same values, the matmuls see the same
//   gathered [N, C] inputs, and a reduce-scatter sums a block in the same rank order as the
//   all-reduce it replaces;
// - the norms' weight (and bias) gradients are each rank's partial sum over its rows, then summed
//   over the ranks: another association of the same float terms than one sum over every row, so
//   they differ by rounding. 1e-5 relative to the tensor's largest element bounds it: each
//   element is a sum of kMicrobatches * B * T = 32 terms, whose reassociation moves it by at most
//   ~32 * 2^-24 ~ 2e-6 of the sum of magnitudes; they are identical on every rank after the
//   reduce;
// - with sequence parallelism, recompute (selective, full) and the split backward (B then W, and
//   all Bs before the Ws) stay bit-identical to the plain backward, as they are without it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/gpt_model.h"
#include "tests/model/thread_tp_comm.h"
#include "tests/model/two_stage_run.h"
#include "tests/support/cpu_backend_fixture.h"

namespace pipelane {
namespace {

using testing::ThreadTpGroup;

using two_stage_run::kB;
using two_stage_run::kT;
using two_stage_run::kMicrobatches;
constexpr double kNormTol = 1e-5;  // see the header: reassociated sums of 32 terms

using two_stage_run::gpt2_tiny;

GptConfig llama_tiny() {
  GptConfig c = two_stage_run::llama_tiny();
  c.bias = BiasKind::All;  // the row-parallel biases too: computed from every row under sp
  return c;
}

using two_stage_run::Order;

struct RankRun {
  std::vector<double> losses;                  // per microbatch
  std::vector<std::vector<float>> grads;       // per stage
  std::vector<std::vector<float>> grad_input;  // per microbatch: stage 1's (this rank's rows under sp)
  std::vector<std::size_t> activation_bytes;   // per stage, one microbatch
};

// One rank's kMicrobatches through stages [0, 2) (embedding) and [2, 4) (head).
RankRun run_rank(const GptConfig& c, bool sp, const RecomputeOptions& rc, Order order, TensorParallelComm* comm) {
  std::vector<two_stage_run::Stage> st = two_stage_run::make_stages(c, comm, rc, sp, order, "sp test");
  const bool split = order != Order::Combined;
  RankRun r;
  for (const two_stage_run::Stage& s : st) r.activation_bytes.push_back(s.model->activation_bytes(kB, kT, split));
  const std::size_t message = static_cast<std::size_t>(st[0].model->sequence_rows(kB, kT)) * c.d_model;
  two_stage_run::Passes passes = two_stage_run::run_passes(st, c, order, message);
  r.losses = std::move(passes.losses);
  r.grad_input = std::move(passes.grad_input);
  for (two_stage_run::Stage& s : st) {
    s.model->reduce_sequence_parallel_gradients(s.grads.data());
    r.grads.push_back(s.grads);
  }
  return r;
}

std::vector<RankRun> run_group(int tp, const GptConfig& c, bool sp, const RecomputeOptions& rc = {},
                               Order order = Order::Combined) {
  ThreadTpGroup group(tp);
  std::vector<RankRun> out(tp);
  group.run([&](int r, TensorParallelComm& comm) { out[r] = run_rank(c, sp, rc, order, &comm); });
  return out;
}

// Which floats of a stage's buffer belong to a norm's weight or bias.
std::vector<bool> norm_mask(const GptConfig& c, StageRange range, int tp) {
  const ParamLayout L(c, range, {0, tp});
  std::vector<bool> mask(L.total_floats(), false);
  auto mark = [&](std::size_t offset) {
    if (offset == ParamLayout::npos) return;
    for (int i = 0; i < c.d_model; ++i) mask[offset + i] = true;
  };
  for (const LayerOffsets& o : L.layers)
    for (std::size_t offset : {o.ln1w, o.ln1b, o.ln2w, o.ln2b}) mark(offset);
  mark(L.lnfw);
  mark(L.lnfb);
  return mask;
}

// sp against tp alone: see the header for what must be exact.
void expect_sp_matches_tp(const GptConfig& c, int tp, const char* what) {
  const std::vector<RankRun> alone = run_group(tp, c, false), sp = run_group(tp, c, true);
  const std::vector<StageRange> ranges = {{0, 2, true, false}, {2, 4, false, true}};
  const std::size_t rows = static_cast<std::size_t>(kB) * kT / tp, C = c.d_model;
  double worst_norm = 0;
  for (int r = 0; r < tp; ++r) {
    EXPECT_EQ(sp[r].losses, alone[r].losses) << what << " rank " << r;
    for (int m = 0; m < kMicrobatches; ++m) {
      const auto begin = alone[r].grad_input[m].begin() + static_cast<std::ptrdiff_t>(r * rows * C);
      EXPECT_EQ(sp[r].grad_input[m], std::vector<float>(begin, begin + static_cast<std::ptrdiff_t>(rows * C)))
          << what << " rank " << r << " microbatch " << m << ": stage 1's input gradient, this rank's rows";
    }
    for (std::size_t k = 0; k < ranges.size(); ++k) {
      const std::vector<bool> norm = norm_mask(c, ranges[k], tp);
      const std::vector<float>&a = sp[r].grads[k], &b = alone[r].grads[k];
      ASSERT_EQ(a.size(), b.size());
      double scale = 0;
      for (std::size_t i = 0; i < b.size(); ++i)
        if (norm[i]) scale = std::max(scale, std::fabs(double(b[i])));
      std::size_t exact_differs = 0;
      for (std::size_t i = 0; i < b.size(); ++i) {
        if (!norm[i]) {
          exact_differs += a[i] != b[i];
          continue;
        }
        worst_norm = std::max(worst_norm, std::fabs(double(a[i]) - b[i]) / scale);
        EXPECT_EQ(a[i], sp[0].grads[k][i]) << what << ": norm gradient differs between ranks 0 and " << r;
      }
      EXPECT_EQ(exact_differs, 0u) << what << " rank " << r << " stage " << k << ": non-norm gradients must be exact";
    }
  }
  EXPECT_LE(worst_norm, kNormTol) << what;
  std::printf("[ %s tp=%d ] losses and non-norm gradients bit-identical; norm gradients' max relative error %.3g\n",
              what, tp, worst_norm);
  // Activations: the residual stream's share drops by the rows other ranks hold.
  EXPECT_LT(sp[0].activation_bytes[0], alone[0].activation_bytes[0]) << what;
}

TEST(SequenceParallel, Gpt2MatchesTensorParallelAlone) {
  expect_sp_matches_tp(gpt2_tiny(), 2, "gpt2");
  expect_sp_matches_tp(gpt2_tiny(), 4, "gpt2");
}

TEST(SequenceParallel, LlamaMatchesTensorParallelAlone) {
  expect_sp_matches_tp(llama_tiny(), 2, "llama");
  GptConfig no_bias = llama_tiny();
  no_bias.bias = BiasKind::None;
  expect_sp_matches_tp(no_bias, 2, "llama bias=none");
}

// Recomputation and the zero-bubble halves change nothing under sequence parallelism either.
TEST(SequenceParallel, RecomputeAndSplitBackwardAreBitIdentical) {
  const RecomputeOptions selective{RecomputeKind::Selective, RecomputeMethod::Uniform, 1};
  const RecomputeOptions full{RecomputeKind::Full, RecomputeMethod::Uniform, 2};
  const RecomputeOptions block{RecomputeKind::Full, RecomputeMethod::Block, 1};
  for (const GptConfig& c : {gpt2_tiny(), llama_tiny()}) {
    const std::vector<RankRun> base = run_group(2, c, true);
    struct Variant {
      const char* name;
      RecomputeOptions rc;
      Order order;
    };
    for (const Variant& v : {Variant{"selective", selective, Order::Combined}, Variant{"full", full, Order::Combined},
                             Variant{"split", {}, Order::SplitInOrder}, Variant{"all B then W", {}, Order::AllBThenW},
                             Variant{"full + all B then W", full, Order::AllBThenW},
                             Variant{"block + selective split", block, Order::SplitInOrder},
                             Variant{"selective + all B then W", selective, Order::AllBThenW}}) {
      const std::vector<RankRun> got = run_group(2, c, true, v.rc, v.order);
      for (int r = 0; r < 2; ++r) {
        EXPECT_EQ(got[r].losses, base[r].losses) << arch_name(c.arch) << " " << v.name << " rank " << r;
        EXPECT_EQ(got[r].grads, base[r].grads) << arch_name(c.arch) << " " << v.name << " rank " << r;
        EXPECT_EQ(got[r].grad_input, base[r].grad_input) << arch_name(c.arch) << " " << v.name << " rank " << r;
      }
    }
  }
}

TEST(SequenceParallel, RefusesWhatItCannotSplit) {
  const GptConfig c = gpt2_tiny();
  EXPECT_THROW(GptStage(c, StageRange::whole(c), testing::cpu_backend(), testing::cpu_stream(), nullptr, {}, true),
               std::invalid_argument);
  ThreadTpGroup group(2);
  group.run([&](int, TensorParallelComm& comm) {
    const GptStage stage(c, StageRange::whole(c), testing::cpu_backend(), testing::cpu_stream(), &comm, {}, true);
    EXPECT_EQ(stage.sequence_rows(2, 8), 8);
    EXPECT_THROW(stage.sequence_rows(1, 7), std::invalid_argument);  // 7 positions over 2 ranks
    EXPECT_THROW(stage.activation_bytes(1, 7), std::invalid_argument);
  });
}

}  // namespace
}  // namespace pipelane
