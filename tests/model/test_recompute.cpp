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
#include "tests/support/cpu_backend_fixture.h"

namespace pipelane {
namespace {

constexpr int kB = 2, kT = 8, kMicrobatches = 2;

GptConfig gpt2_tiny() {
  GptConfig c;
  c.layers = 4;
  c.d_model = 32;
  c.heads = 4;
  c.max_seq_len = 8;
  c.vocab_size = 61;
  return c;
}

GptConfig llama_tiny() {
  GptConfig c = gpt2_tiny();
  c.apply_arch_defaults(ModelArch::Llama);
  c.kv_heads = 2;
  c.ffn_hidden = 48;
  return c;
}

enum class Order { Combined, SplitInOrder, Interleaved };

struct StageRun {
  std::vector<double> losses;
  std::vector<std::vector<float>> grads;       // per stage
  std::vector<std::vector<float>> grad_input;  // per microbatch: stage 1's
  std::vector<std::size_t> high_water;         // per stage: its arena's
};

// kMicrobatches microbatches through stages [0, 2) (embedding) and [2, 4) (head), one after the other.
StageRun run(const GptConfig& c, const RecomputeOptions& rc, Order order, TensorParallelComm* comm) {
  const bool split = order != Order::Combined;
  const std::vector<StageRange> ranges = {{0, 2, true, false}, {2, 4, false, true}};
  struct Stage {
    std::unique_ptr<GptStage> model;
    std::unique_ptr<Arena> arena;
    std::vector<float> params, grads;
    std::vector<MicrobatchActivations> acts;
    StageScratch scratch;
  };
  std::vector<Stage> st(ranges.size());
  for (std::size_t k = 0; k < ranges.size(); ++k) {
    Stage& s = st[k];
    s.model = std::make_unique<GptStage>(c, ranges[k], testing::cpu_backend(), testing::cpu_stream(), comm, rc);
    s.arena = std::make_unique<Arena>("recompute test", kMicrobatches * s.model->activation_bytes(kB, kT, split) +
                                                            s.model->scratch_bytes(kB, kT));
    s.params.assign(s.model->layout().total_floats(), 0.f);
    s.grads.assign(s.params.size(), 0.f);
    GptStage::init_parameters(s.model->layout(), s.params.data(), 11);
    for (int m = 0; m < kMicrobatches; ++m) s.acts.push_back(s.model->allocate_activations(*s.arena, kB, kT, split));
    s.scratch = s.model->allocate_scratch(*s.arena, kB, kT);
  }
  std::mt19937 g(7);
  std::vector<std::vector<std::int32_t>> tokens(kMicrobatches), targets(kMicrobatches);
  for (int m = 0; m < kMicrobatches; ++m)
    for (int i = 0; i < kB * kT; ++i) tokens[m].push_back(g() % c.vocab_size), targets[m].push_back(g() % c.vocab_size);
  StageRun r;
  r.losses.assign(kMicrobatches, 0.0);
  r.grad_input.assign(kMicrobatches, std::vector<float>(static_cast<std::size_t>(kB) * kT * c.d_model));
  const float scale = 1.0f / (kMicrobatches * kB * kT);
  auto F = [&](int m) {
    r.losses[m] += st[0].model->forward(st[0].params.data(), st[0].grads.data(), st[0].acts[m], st[0].scratch,
                                        tokens[m].data(), nullptr, nullptr, scale);
    r.losses[m] += st[1].model->forward(st[1].params.data(), st[1].grads.data(), st[1].acts[m], st[1].scratch,
                                        nullptr, st[0].acts[m].output(), targets[m].data(), scale);
  };
  auto B = [&](int m) {
    const std::int32_t* tok[] = {tokens[m].data(), nullptr};
    const float* gout[] = {r.grad_input[m].data(), nullptr};
    float* gin[] = {nullptr, r.grad_input[m].data()};
    for (int k = 1; k >= 0; --k) {
      Stage& s = st[k];
      if (split) s.model->backward_input(s.params.data(), s.grads.data(), s.acts[m], s.scratch, tok[k], gout[k], gin[k]);
      else s.model->backward(s.params.data(), s.grads.data(), s.acts[m], s.scratch, tok[k], gout[k], gin[k]);
    }
  };
  auto W = [&](int m) {
    for (int k = 1; k >= 0; --k)
      st[k].model->backward_weight(st[k].params.data(), st[k].grads.data(), st[k].acts[m], st[k].scratch,
                                   k == 0 ? tokens[m].data() : nullptr);
  };
  for (int m = 0; m < kMicrobatches; ++m) {
    F(m);
    B(m);
    if (order == Order::SplitInOrder) W(m);
  }
  if (order == Order::Interleaved)
    for (int m = 0; m < kMicrobatches; ++m) W(m);
  for (Stage& s : st) {
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
    for (Order order : {Order::Combined, Order::SplitInOrder, Order::Interleaved}) {
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
