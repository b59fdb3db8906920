// The zero-bubble split backward (GptStage::backward_input = B, backward_weight = W) against the
// combined backward(): for the whole model, a two-stage pipeline and tensor parallelism (tp = 2,
// ranks as threads). B then W must give bit-identical gradients and input gradients, B of a later
// microbatch may run before W of an earlier one, all communication happens in B, and activations
// allocated without split support are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/gpt_model.h"
#include "tests/model/thread_tp_comm.h"
#include "tests/support/cpu_backend_fixture.h"

namespace pipelane {
namespace {

using testing::ThreadTpGroup;

GptConfig tiny_config() {
  GptConfig c;
  c.layers = 4;
  c.d_model = 32;
  c.heads = 4;
  c.max_seq_len = 16;
  c.vocab_size = 97;  // padded to 128
  return c;
}

constexpr int kB = 2, kT = 12, kMicrobatches = 2;

// Forwards to a group's comm and counts the collectives, to see which half communicates.
class CountingComm final : public TensorParallelComm {
 public:
  explicit CountingComm(TensorParallelComm& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void all_reduce_sum(float* d, std::size_t n) override {
    ++calls;
    inner_.all_reduce_sum(d, n);
  }
  void all_reduce_max(float* d, std::size_t n) override {
    ++calls;
    inner_.all_reduce_max(d, n);
  }
  void all_gather(const float* in, float* out, std::size_t n) override {
    ++calls;
    inner_.all_gather(in, out, n);
  }
  void reduce_scatter_sum(float* d, std::size_t n) override {
    ++calls;
    inner_.reduce_scatter_sum(d, n);
  }
  int calls = 0;

 private:
  TensorParallelComm& inner_;
};

// One stage with its own parameters, gradients and one activation set per microbatch.
struct StageState {
  std::unique_ptr<GptStage> stage;
  std::unique_ptr<Arena> arena;
  std::vector<float> params, grads;
  std::vector<MicrobatchActivations> acts;
  StageScratch scratch;
  StageState(const GptConfig& c, StageRange r, TensorParallelComm* comm, bool split) {
    stage = std::make_unique<GptStage>(c, r, testing::cpu_backend(), testing::cpu_stream(), comm);
    arena = std::make_unique<Arena>("split", kMicrobatches * stage->activation_bytes(kB, kT, split) +
                                                 stage->scratch_bytes(kB, kT));
    params.assign(stage->layout().total_floats(), 0.f);
    grads.assign(stage->layout().total_floats(), 0.f);
    GptStage::init_parameters(stage->layout(), params.data(), 17);
    for (int m = 0; m < kMicrobatches; ++m)
      acts.push_back(stage->allocate_activations(*arena, kB, kT, split));
    scratch = stage->allocate_scratch(*arena, kB, kT);
  }
};

struct Data {
  std::vector<std::vector<std::int32_t>> tokens, targets;
  explicit Data(int vocab) {
    std::mt19937 g(123);
    for (int m = 0; m < kMicrobatches; ++m) {
      tokens.emplace_back(kB * kT);
      targets.emplace_back(kB * kT);
      for (auto& t : tokens.back()) t = static_cast<std::int32_t>(g() % vocab);
      for (auto& t : targets.back()) t = static_cast<std::int32_t>(g() % vocab);
    }
  }
};

enum class Order {
  kCombined,      // F0 backward0 F1 backward1 (the reference)
  kSplitInOrder,  // F0 B0 W0 F1 B1 W1
  kInterleaved,   // F0 B0 F1 B1 W0 W1: B of microbatch 1 (and its forward) before W of 0
};

struct RunResult {
  std::vector<std::vector<float>> grads;                    // per stage
  std::vector<std::vector<std::vector<float>>> grad_input;  // [microbatch][stage], stage 0 empty
  std::vector<double> losses;
  int backward_comm_calls = 0;  // collectives in backward() or backward_input
  int weight_comm_calls = 0;    // collectives in backward_weight
  std::vector<ParamLayout> layouts;
};

// Runs kMicrobatches microbatches through the pipeline `ranges` (one process, stage after stage)
// in the given order, accumulating gradients. comm: this rank's tp comm, or null.
RunResult run(const GptConfig& c, const std::vector<StageRange>& ranges, TensorParallelComm* comm,
              Order order, const Data& data) {
  RunResult res;
  std::unique_ptr<CountingComm> counting = comm ? std::make_unique<CountingComm>(*comm) : nullptr;
  const bool split = order != Order::kCombined;
  std::vector<std::unique_ptr<StageState>> stages;
  for (const StageRange& r : ranges)
    stages.push_back(std::make_unique<StageState>(c, r, counting.get(), split));
  const int S = static_cast<int>(ranges.size());
  const std::size_t NC = static_cast<std::size_t>(kB) * kT * c.d_model;
  res.grad_input.assign(kMicrobatches, std::vector<std::vector<float>>(S));
  for (auto& mb : res.grad_input)
    for (int k = 1; k < S; ++k) mb[k].assign(NC, 0.f);
  res.losses.assign(kMicrobatches, 0.0);
  const float scale = 1.0f / (kMicrobatches * kB * kT);
  auto calls = [&] { return counting ? counting->calls : 0; };

  auto F = [&](int m) {
    const void* in = nullptr;
    for (int k = 0; k < S; ++k) {
      StageState& s = *stages[k];
      res.losses[m] += s.stage->forward(s.params.data(), s.grads.data(), s.acts[m], s.scratch,
                                        k == 0 ? data.tokens[m].data() : nullptr, in,
                                        k == S - 1 ? data.targets[m].data() : nullptr, scale);
      in = s.acts[m].output();
    }
  };
  auto B = [&](int m) {  // the combined backward, or B
    const int before = calls();
    const float* gout = nullptr;
    for (int k = S - 1; k >= 0; --k) {
      StageState& s = *stages[k];
      float* gin = k > 0 ? res.grad_input[m][k].data() : nullptr;
      const std::int32_t* tok = k == 0 ? data.tokens[m].data() : nullptr;
      if (split)
        s.stage->backward_input(s.params.data(), s.grads.data(), s.acts[m], s.scratch, tok, gout,
                                gin);
      else
        s.stage->backward(s.params.data(), s.grads.data(), s.acts[m], s.scratch, tok, gout, gin);
      gout = gin;
    }
    res.backward_comm_calls += calls() - before;
  };
  auto W = [&](int m) {
    const int before = calls();
    for (int k = S - 1; k >= 0; --k) {
      StageState& s = *stages[k];
      s.stage->backward_weight(s.params.data(), s.grads.data(), s.acts[m], s.scratch,
                               k == 0 ? data.tokens[m].data() : nullptr);
    }
    res.weight_comm_calls += calls() - before;
  };

  switch (order) {
    case Order::kCombined:
      for (int m = 0; m < kMicrobatches; ++m) F(m), B(m);
      break;
    case Order::kSplitInOrder:
      for (int m = 0; m < kMicrobatches; ++m) F(m), B(m), W(m);
      break;
    case Order::kInterleaved:
      for (int m = 0; m < kMicrobatches; ++m) F(m), B(m);
      for (int m = 0; m < kMicrobatches; ++m) W(m);
      break;
  }
  for (auto& s : stages) {
    res.grads.push_back(s->grads);
    res.layouts.push_back(s->stage->layout());
  }
  return res;
}

std::vector<float> slice(const std::vector<float>& buf, const ParamEntry& e) {
  return {buf.begin() + e.offset, buf.begin() + e.offset + e.numel};
}

// Compares a split run with the combined reference. Every tensor must be bit-identical, except
// `tolerant` ones (the whole model's tied wte under kInterleaved, see below), which must agree
// within 1e-6 relative. Returns the largest relative difference seen in those.
double expect_same(const RunResult& got, const RunResult& want, const std::string& what,
                   bool tolerant_wte) {
  EXPECT_EQ(got.losses, want.losses) << what;
  double worst = 0;
  for (std::size_t k = 0; k < want.grads.size(); ++k) {
    for (const ParamEntry& e : want.layouts[k].entries()) {
      const auto a = slice(got.grads[k], e), b = slice(want.grads[k], e);
      if (tolerant_wte && e.name == "wte") {
        double diff = 0, scale = 0;
        for (std::size_t i = 0; i < b.size(); ++i) {
          diff = std::max(diff, std::fabs(double(a[i]) - b[i]));
          scale = std::max(scale, std::fabs(double(b[i])));
        }
        EXPECT_GT(scale, 0.0);
        EXPECT_LE(diff, 1e-6 * scale) << what << " stage " << k << " " << e.name;
        worst = std::max(worst, diff / scale);
      } else {
        EXPECT_EQ(a, b) << what << " stage " << k << " " << e.name;
      }
    }
  }
  for (int m = 0; m < kMicrobatches; ++m)
    for (std::size_t k = 1; k < want.grads.size(); ++k)
      EXPECT_EQ(got.grad_input[m][k], want.grad_input[m][k])
          << what << " grad_input microbatch " << m << " stage " << k;
  EXPECT_EQ(got.backward_comm_calls, want.backward_comm_calls) << what;
  EXPECT_EQ(got.weight_comm_calls, 0) << what << ": backward_weight must not communicate";
  return worst;
}

// Whole model and two stages, tp = 1.
//
// Interleaving: every gradient tensor gets one += per microbatch from W, in microbatch order
// either way, so it is bit-identical -- except the whole model's tied wte, which also receives
// the head's share during forward. In order it sums head0 + emb0 + head1 + emb1; interleaved
// (F1 runs before W0) head0 + head1 + emb0 + emb1. Float addition is not associative, so rows of
// tokens that appear in the batch may differ in the last bits: 1e-6 relative. On a two-stage
// pipeline the head and the embedding are on different stages, so there it is bit-identical too.
// The Llama family (GQA 4 on 2, RoPE, SwiGLU, q/k/v biases, untied head) and GPT-2's names with
// RMSNorm, RoPE and no biases: the same checks as GPT-2's below.
std::vector<GptConfig> family_configs() {
  GptConfig llama = tiny_config();
  llama.apply_arch_defaults(ModelArch::Llama);
  llama.kv_heads = 2;
  llama.ffn_hidden = 48;
  llama.bias = BiasKind::Qkv;
  llama.rope_theta = 10000;
  GptConfig gpt2_rope = tiny_config();
  gpt2_rope.norm = NormKind::RmsNorm;
  gpt2_rope.position = PositionKind::Rope;
  gpt2_rope.bias = BiasKind::None;
  gpt2_rope.tie_embeddings = false;
  return {llama, gpt2_rope};
}

void check_split_matches_backward(const GptConfig& c);
void check_split_matches_backward_under_tp(const GptConfig& c);

TEST(SplitBackward, MatchesBackwardBitForBit) { check_split_matches_backward(tiny_config()); }
TEST(SplitBackward, MatchesBackwardUnderTensorParallelism) { check_split_matches_backward_under_tp(tiny_config()); }
TEST(SplitBackward, LlamaFamilyMatchesBackwardBitForBit) {
  for (const GptConfig& c : family_configs()) {
    check_split_matches_backward(c);
    check_split_matches_backward_under_tp(c);
  }
}

void check_split_matches_backward(const GptConfig& c) {
  const Data data(c.vocab_size);
  const std::vector<std::vector<StageRange>> pipelines = {
      {StageRange::whole(c)}, {{0, 2, true, false}, {2, 4, false, true}}};
  for (const auto& ranges : pipelines) {
    const std::string name = ranges.size() == 1 ? "whole model" : "two stages";
    const RunResult ref = run(c, ranges, nullptr, Order::kCombined, data);
    expect_same(run(c, ranges, nullptr, Order::kSplitInOrder, data), ref, name + " in order",
                false);
    const double wte = expect_same(run(c, ranges, nullptr, Order::kInterleaved, data), ref,
                                   name + " interleaved", ranges.size() == 1);
    std::printf("[ %s ] B+W == backward bit for bit; interleaved wte max rel diff %.3g\n",
                name.c_str(), wte);
  }
}

void check_split_matches_backward_under_tp(const GptConfig& c) {
  const Data data(c.vocab_size);
  const int tp = 2;
  const std::vector<std::vector<StageRange>> pipelines = {
      {StageRange::whole(c)}, {{0, 2, true, false}, {2, 4, false, true}}};
  for (const auto& ranges : pipelines) {
    const std::string name = ranges.size() == 1 ? "whole model" : "two stages";
    ThreadTpGroup group(tp);
    std::vector<RunResult> ref(tp), in_order(tp), interleaved(tp);
    group.run([&](int r, TensorParallelComm& comm) {
      ref[r] = run(c, ranges, &comm, Order::kCombined, data);
      in_order[r] = run(c, ranges, &comm, Order::kSplitInOrder, data);
      interleaved[r] = run(c, ranges, &comm, Order::kInterleaved, data);
    });
    double worst = 0;
    for (int r = 0; r < tp; ++r) {
      const std::string what = name + " tp 2 rank " + std::to_string(r);
      EXPECT_GT(ref[r].backward_comm_calls, 0);
      expect_same(in_order[r], ref[r], what + " in order", false);
      worst = std::max(worst, expect_same(interleaved[r], ref[r], what + " interleaved",
                                          ranges.size() == 1));
    }
    std::printf("[ %s, tp=2 ] B+W == backward bit for bit, W does no collectives; "
                "interleaved wte max rel diff %.3g\n",
                name.c_str(), worst);
  }
}

TEST(SplitBackward, MemoryIsPaidOnlyWhenAsked) {
  const GptConfig c = tiny_config();
  const std::size_t N = kB * kT, C = c.d_model;
  ThreadTpGroup group(2);
  for (int tp : {1, 2}) {
    for (StageRange r : {StageRange::whole(c), StageRange{2, 4, false, true}}) {
      GptStage stage(c, r, testing::cpu_backend(), testing::cpu_stream(), tp == 1 ? nullptr : &group.comm(0));
      const std::size_t plain = stage.activation_bytes(kB, kT);
      const std::size_t split = stage.activation_bytes(kB, kT, true);
      // Per layer 4 [N,C] + d_fch [N,4C/tp] + d_qkv [N,3C/tp]; plus d_input on the first stage.
      // These sizes are multiples of the arena alignment, so the bytes are exact.
      const std::size_t extra =
          r.num_layers() * (4 * N * C + 7 * N * C / tp) + (r.has_embedding ? N * C : 0);
      EXPECT_EQ(split - plain, extra * sizeof(float)) << "tp " << tp;
      Arena arena("sizes", plain + split);
      const MicrobatchActivations a = stage.allocate_activations(arena, kB, kT);
      EXPECT_EQ(arena.used(), plain);
      const MicrobatchActivations b = stage.allocate_activations(arena, kB, kT, true);
      EXPECT_EQ(arena.used(), arena.capacity());
      EXPECT_FALSE(a.split_backward);
      EXPECT_TRUE(b.split_backward);
      EXPECT_EQ(a.d_input, nullptr);
      EXPECT_EQ(b.d_input != nullptr, r.has_embedding);
      for (const LayerActivations& h : a.layers) EXPECT_EQ(h.d_res_out, nullptr);
      for (const LayerActivations& h : b.layers) EXPECT_NE(h.d_qkv, nullptr);
    }
  }
}

TEST(SplitBackward, MisuseIsAnError) {
  const GptConfig c = tiny_config();
  const Data data(c.vocab_size);
  const auto& tok = data.tokens[0];
  const auto& tgt = data.targets[0];
  {  // activations allocated without split support
    StageState s(c, StageRange::whole(c), nullptr, false);
    s.stage->forward(s.params.data(), s.grads.data(), s.acts[0], s.scratch, tok.data(), nullptr,
                     tgt.data(), 1.f);
    EXPECT_THROW(s.stage->backward_weight(s.params.data(), s.grads.data(), s.acts[0], s.scratch,
                                          tok.data()),
                 std::logic_error);
    EXPECT_THROW(s.stage->backward_input(s.params.data(), s.grads.data(), s.acts[0], s.scratch,
                                         tok.data(), nullptr, nullptr),
                 std::logic_error);
    // backward() itself still works on them.
    s.stage->backward(s.params.data(), s.grads.data(), s.acts[0], s.scratch, tok.data(), nullptr,
                      nullptr);
  }
  {  // out of order
    StageState s(c, StageRange::whole(c), nullptr, true);
    s.stage->forward(s.params.data(), s.grads.data(), s.acts[0], s.scratch, tok.data(), nullptr,
                     tgt.data(), 1.f);
    EXPECT_THROW(s.stage->backward_weight(s.params.data(), s.grads.data(), s.acts[0], s.scratch,
                                          tok.data()),
                 std::logic_error)
        << "W before B";
    s.stage->backward_input(s.params.data(), s.grads.data(), s.acts[0], s.scratch, tok.data(),
                            nullptr, nullptr);
    EXPECT_THROW(s.stage->forward(s.params.data(), s.grads.data(), s.acts[0], s.scratch,
                                  tok.data(), nullptr, tgt.data(), 1.f),
                 std::logic_error)
        << "forward would overwrite what W still needs";
    EXPECT_THROW(s.stage->backward_input(s.params.data(), s.grads.data(), s.acts[0], s.scratch,
                                         tok.data(), nullptr, nullptr),
                 std::logic_error)
        << "B twice";
    s.stage->backward_weight(s.params.data(), s.grads.data(), s.acts[0], s.scratch, tok.data());
    EXPECT_THROW(s.stage->backward_weight(s.params.data(), s.grads.data(), s.acts[0], s.scratch,
                                          tok.data()),
                 std::logic_error)
        << "W twice";
    // After W the activations are free for the next microbatch.
    s.stage->forward(s.params.data(), s.grads.data(), s.acts[0], s.scratch, tok.data(), nullptr,
                     tgt.data(), 1.f);
  }
}

}  // namespace
}  // namespace pipelane
