// Activation recomputation (model/recompute.h) against recompute = none: for GPT-2 and a Llama
// (RMSNorm, RoPE, SwiGLU, grouped-query attention), tp = 1 and 2 (ranks as threads), the whole
// backward and the zero-bubble halves (B then W, and B of the next microbatch before W), a
// two-stage pipeline run stage after stage. Losses, every parameter gradient and every input
// gradient must be bit-identical; and the memory the activations take must drop.
#include <gtest/gtest.h>

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

using two_stage_run::kB;
using two_stage_run::kT;
using two_stage_run::kMicrobatches;

using two_stage_run::gpt2_tiny;
using two_stage_run::llama_tiny;

using two_stage_run::Order;

struct StageRun {
  std::vector<double> losses;
  std::vector<std::vector<float>> grads;       // per stage
  std::vector<std::vector<float>> grad_input;  // per microbatch: stage 1's
  std::vector<std::size_t> high_water;         // per stage: its arena's
};

// kMicrobatches microbatches through stages [0, 2) (embedding) and [2, 4) (head), one after the other.
// compute = BF16: on a bf16-compute CPU backend of its own (a tp rank's thread must not share one:
// the oneDNN GEMM holds a lock across the vocab-parallel head's collectives).
// Copy: the GEMMs read a bf16 copy of the parameters (bf16 storage's, as the executor passes it)
// instead of the fp32 parameters; Zeros: a bf16 copy of zeros.
enum class Bf16Copy { None, Copy, Zeros };
StageRun run(const GptConfig& c, const RecomputeOptions& rc, Order order, TensorParallelComm* comm,
             DType compute = DType::F32, DType storage = DType::F32, Bf16Copy bf16_weights = Bf16Copy::None) {
  const std::unique_ptr<Backend> bf16 = compute == DType::BF16 ? make_cpu_backend(1, DType::BF16) : nullptr;
  const std::unique_ptr<Stream> bf16_stream = bf16 ? bf16->create_stream(StreamPriority::High) : nullptr;
  std::vector<two_stage_run::Stage> st =
      two_stage_run::make_stages(c, comm, rc, false, order, "recompute test", storage, bf16.get(), bf16_stream.get());
  if (bf16_weights != Bf16Copy::None)
    two_stage_run::with_bf16_weights(st, *bf16, *bf16_stream, bf16_weights == Bf16Copy::Zeros);
  two_stage_run::Passes passes =
      two_stage_run::run_passes(st, c, order, static_cast<std::size_t>(kB) * kT * c.d_model);
  StageRun r;
  r.losses = std::move(passes.losses);
  r.grad_input = std::move(passes.grad_input);
  for (const two_stage_run::Stage& s : st) {
    r.grads.push_back(s.grads);
    r.high_water.push_back(s.arena->high_water());
  }
  return r;
}

struct Case {
  const char* name;
  RecomputeOptions rc;
};
const Case kCases[] = {
    {"selective", {RecomputeKind::Selective, RecomputeMethod::Uniform, 1}},
    {"full_uniform_1", {RecomputeKind::Full, RecomputeMethod::Uniform, 1}},
    {"full_uniform_2", {RecomputeKind::Full, RecomputeMethod::Uniform, 2}},
    {"full_uniform_3", {RecomputeKind::Full, RecomputeMethod::Uniform, 3}},  // more than a stage's 2 layers
    {"full_block_1", {RecomputeKind::Full, RecomputeMethod::Block, 1}},
};

// Bit for bit: EXPECT_EQ on the vectors compares every float exactly.
void expect_identical(const StageRun& got, const StageRun& want, const std::string& what) {
  EXPECT_EQ(got.losses, want.losses) << what;
  EXPECT_EQ(got.grads, want.grads) << what;
  EXPECT_EQ(got.grad_input, want.grad_input) << what;
}

TEST(Recompute, BitIdenticalToNoneForEveryOrderFamilyAndTp) {
  for (const GptConfig& c : {gpt2_tiny(), llama_tiny()}) {
    for (Order order : {Order::Combined, Order::SplitInOrder, Order::AllBThenW}) {
      const std::string where = std::string(c.split_projections() ? "llama" : "gpt2") + " order " +
                                std::to_string(static_cast<int>(order));
      const StageRun none = run(c, {}, order, nullptr);
      ASSERT_NE(none.losses[0], 0.0);
      for (const Case& k : kCases) expect_identical(run(c, k.rc, order, nullptr), none, where + " " + k.name);
      // tp = 2: each rank against its own recompute = none run (collectives run in the reruns too).
      testing::ThreadTpGroup group(2);
      std::vector<StageRun> base(2);
      group.run([&](int rank, TensorParallelComm& comm) { base[rank] = run(c, {}, order, &comm); });
      for (const Case& k : kCases) {
        std::vector<StageRun> got(2);
        group.run([&](int rank, TensorParallelComm& comm) { got[rank] = run(c, k.rc, order, &comm); });
        for (int rank = 0; rank < 2; ++rank)
          expect_identical(got[rank], base[rank], where + " tp2 rank " + std::to_string(rank) + " " + k.name);
      }
    }
  }
}

// bf16 storage (GptStage's storage = BF16, bf16 compute): recomputation rounds what it reruns as
// storage rounds what it keeps, so it is bit-identical to none there too, for both families, every
// backward order and tp = 2; the messages between the stages (grad_input) included.
TEST(Recompute, BitIdenticalToNoneUnderBf16Storage) {
  for (const GptConfig& c : {gpt2_tiny(), llama_tiny()}) {
    for (Order order : {Order::Combined, Order::SplitInOrder, Order::AllBThenW}) {
      const std::string where = std::string(c.split_projections() ? "llama" : "gpt2") + " bf16 storage order " +
                                std::to_string(static_cast<int>(order));
      const StageRun none = run(c, {}, order, nullptr, DType::BF16, DType::BF16);
      ASSERT_NE(none.losses[0], 0.0);
      EXPECT_NE(none.losses, run(c, {}, order, nullptr, DType::BF16).losses) << where << ": storage is not on";
      for (const Case& k : kCases)
        expect_identical(run(c, k.rc, order, nullptr, DType::BF16, DType::BF16), none, where + " " + k.name);
      testing::ThreadTpGroup group(2);
      std::vector<StageRun> base(2);
      group.run([&](int rank, TensorParallelComm& comm) {
        base[rank] = run(c, {}, order, &comm, DType::BF16, DType::BF16);
      });
      for (const Case& k : kCases) {
        std::vector<StageRun> got(2);
        group.run([&](int rank, TensorParallelComm& comm) {
          got[rank] = run(c, k.rc, order, &comm, DType::BF16, DType::BF16);
        });
        for (int rank = 0; rank < 2; ++rank)
          expect_identical(got[rank], base[rank], where + " tp2 rank " + std::to_string(rank) + " " + k.name);
      }
    }
  }
}

// [train] gemm_weights = bf16: the GEMMs read a bf16 copy in place of rounding the fp32 parameters,
// the same values, so losses, gradients and the messages between the stages keep every bit, for
// both families, every backward order, each recompute choice and tp = 2 (the vocab-parallel head).
TEST(Bf16Weights, ChangeNoBitUnderBf16Storage) {
  for (const GptConfig& c : {gpt2_tiny(), llama_tiny()}) {
    for (Order order : {Order::Combined, Order::SplitInOrder, Order::AllBThenW}) {
      const std::string where = std::string(c.split_projections() ? "llama" : "gpt2") + " order " +
                                std::to_string(static_cast<int>(order));
      const StageRun fp32_weights = run(c, {}, order, nullptr, DType::BF16, DType::BF16);
      EXPECT_NE(run(c, {}, order, nullptr, DType::BF16, DType::BF16, Bf16Copy::Zeros).losses, fp32_weights.losses)
          << where << ": the GEMMs do not read the bf16 copy";
      for (const Case& k : kCases)
        expect_identical(run(c, k.rc, order, nullptr, DType::BF16, DType::BF16, Bf16Copy::Copy),
                         run(c, k.rc, order, nullptr, DType::BF16, DType::BF16), where + " " + k.name);
      testing::ThreadTpGroup group(2);
      std::vector<StageRun> with(2), without(2);
      group.run([&](int rank, TensorParallelComm& comm) {
        with[rank] = run(c, {}, order, &comm, DType::BF16, DType::BF16, Bf16Copy::Copy);
        without[rank] = run(c, {}, order, &comm, DType::BF16, DType::BF16);
      });
      for (int rank = 0; rank < 2; ++rank)
        expect_identical(with[rank], without[rank], where + " tp2 rank " + std::to_string(rank));
    }
  }
}

// The arena's high-water mark (what was really carved out) drops: selective by the attention
// core's [B, heads, T, T] per layer less one shared copy; full to one output per layer (group)
// plus one group's workspace.
TEST(Recompute, ActivationMemoryDrops) {
  const GptConfig c = gpt2_tiny();
  const RecomputeOptions selective{RecomputeKind::Selective, RecomputeMethod::Uniform, 1};
  const RecomputeOptions full{RecomputeKind::Full, RecomputeMethod::Uniform, 1};
  const StageRun none = run(c, {}, Order::Combined, nullptr);
  const StageRun sel = run(c, selective, Order::Combined, nullptr);
  const StageRun all = run(c, full, Order::Combined, nullptr);
  for (int k = 0; k < 2; ++k) {
    EXPECT_LT(sel.high_water[k], none.high_water[k]) << "stage " << k;
    EXPECT_LT(all.high_water[k], sel.high_water[k]) << "stage " << k;
  }
  // Exactly: selective saves (layers * microbatches - 1) attention cores and pays one throwaway
  // output [N, C]; each layer's probabilities are B * heads * T * T floats (the CPU backend's).
  const std::size_t att = static_cast<std::size_t>(kB) * c.heads * kT * kT * sizeof(float);
  const std::size_t out = static_cast<std::size_t>(kB) * kT * c.d_model * sizeof(float);
  EXPECT_EQ(none.high_water[0] - sel.high_water[0], (2 * kMicrobatches - 1) * att - out);
  // The stage's own arithmetic agrees with what the arena saw.
  GptStage stage(c, {0, 2, true, false}, testing::cpu_backend(), testing::cpu_stream(), nullptr, full);
  EXPECT_EQ(all.high_water[0], kMicrobatches * stage.activation_bytes(kB, kT) + stage.scratch_bytes(kB, kT));
}

TEST(Recompute, PlansFollowMegatronsMethods) {
  const auto keeps = [](RecomputeOptions o, int n) {
    std::string s;
    for (const LayerRecompute& p : plan_recompute(o, n))
      s += p.keeps == LayerKeeps::Everything ? 'E' : p.keeps == LayerKeeps::AllButAttentionCore ? 'S' : 'O';
    return s;
  };
  EXPECT_EQ(keeps({}, 3), "EEE");
  EXPECT_EQ(keeps({RecomputeKind::Selective, RecomputeMethod::Uniform, 1}, 3), "SSS");
  EXPECT_EQ(keeps({RecomputeKind::Full, RecomputeMethod::Block, 2}, 5), "OOEEE");
  EXPECT_EQ(keeps({RecomputeKind::Full, RecomputeMethod::Uniform, 2}, 5), "OOOOO");
  const auto plan = plan_recompute({RecomputeKind::Full, RecomputeMethod::Uniform, 2}, 5);
  EXPECT_EQ(plan[3].group_first, 2);
  EXPECT_EQ(plan[4].group_first, 4);
  EXPECT_EQ(plan[4].group_last, 4);
  EXPECT_EQ(recompute_workspace_layers(plan), 2);
  EXPECT_THROW(plan_recompute({RecomputeKind::Full, RecomputeMethod::Uniform, 0}, 2), std::invalid_argument);
  EXPECT_THROW(parse_recompute_kind("partial"), std::invalid_argument);
  EXPECT_EQ(parse_recompute_method("block"), RecomputeMethod::Block);
}

}  // namespace
}  // namespace pipelane
