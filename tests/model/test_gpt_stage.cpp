#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "model/gpt_model.h"
#include "tests/support/cpu_backend_fixture.h"

namespace pipelane {
namespace {

GptConfig tiny_config() {
  GptConfig c;
  c.layers = 4;
  c.d_model = 32;
  c.heads = 4;
  c.max_seq_len = 16;
  c.vocab_size = 97;  // padded to 128
  return c;
}

// A stage with its own parameters, gradients and activations, for tests.
struct StageHarness {
  GptStage stage;
  Arena arena;
  std::vector<float> params, grads;
  MicrobatchActivations acts;
  StageScratch scratch;
  StageHarness(const GptConfig& c, StageRange r, int B, int T, std::uint64_t seed)
      : stage(c, r, testing::cpu_backend(), testing::cpu_stream()),
        arena("test", stage.activation_bytes(B, T) + stage.scratch_bytes(B, T)),
        params(stage.layout().total_floats()),
        grads(stage.layout().total_floats(), 0.f) {
    GptStage::init_parameters(stage.layout(), params.data(), seed);
    acts = stage.allocate_activations(arena, B, T);
    scratch = stage.allocate_scratch(arena, B, T);
  }
  std::vector<float> tensor(const std::vector<float>& buf, const std::string& name) const {
    const ParamEntry* e = stage.layout().find(name);
    EXPECT_NE(e, nullptr) << name;
    if (!e) return {};
    return {buf.begin() + e->offset, buf.begin() + e->offset + e->numel};
  }
};

void random_tokens(std::vector<std::int32_t>& v, int vocab, unsigned seed) {
  std::mt19937 g(seed);
  for (auto& t : v) t = static_cast<std::int32_t>(g() % vocab);
}

TEST(GptStage, ArenaSizesMatchWhatAllocationUses) {
  const GptConfig c = tiny_config();
  StageHarness h(c, StageRange::whole(c), 2, 12, 1);
  EXPECT_EQ(h.arena.used(), h.arena.capacity());
}

TEST(GptStage, InitialisationFollowsGpt2) {
  GptConfig c = tiny_config();
  c.d_model = 64;
  StageHarness h(c, StageRange::whole(c), 1, 4, 7);
  auto stddev = [](const std::vector<float>& v) {
    double s = 0, s2 = 0;
    for (float x : v) s += x, s2 += double(x) * x;
    const double m = s / v.size();
    return std::sqrt(s2 / v.size() - m * m);
  };
  EXPECT_NEAR(stddev(h.tensor(h.params, "h.0.attn.c_attn.weight")), 0.02, 0.001);
  EXPECT_NEAR(stddev(h.tensor(h.params, "h.1.mlp.c_proj.weight")), 0.02 / std::sqrt(8.0), 0.0005);
  for (float x : h.tensor(h.params, "h.2.ln_1.weight")) ASSERT_EQ(x, 1.0f);
  for (float x : h.tensor(h.params, "h.2.attn.c_attn.bias")) ASSERT_EQ(x, 0.0f);
  const auto wte = h.tensor(h.params, "wte");
  for (std::size_t i = static_cast<std::size_t>(c.vocab_size) * c.d_model; i < wte.size(); ++i)
    ASSERT_EQ(wte[i], 0.0f) << "padded vocabulary rows must start at zero";
  // Different seeds give different weights; the same seed the same ones.
  StageHarness again(c, StageRange::whole(c), 1, 4, 7), other(c, StageRange::whole(c), 1, 4, 8);
  EXPECT_EQ(h.params, again.params);
  EXPECT_NE(h.params, other.params);
}

TEST(GptStage, TwoStageSplitEqualsWholeModel) {
  const GptConfig c = tiny_config();
  const int B = 2, T = 12;
  StageHarness whole(c, StageRange::whole(c), B, T, 42);
  StageHarness first(c, {0, 2, true, false}, B, T, 42);
  StageHarness last(c, {2, 4, false, true}, B, T, 42);

  // Each stage initialises exactly its slice of the whole model.
  for (const StageHarness* part : {&first, &last})
    for (const ParamEntry& e : part->stage.layout().entries())
      ASSERT_EQ(part->tensor(part->params, e.name), whole.tensor(whole.params, e.name)) << e.name;

  std::vector<std::int32_t> tokens(B * T), targets(B * T);
  random_tokens(tokens, c.vocab_size, 1);
  random_tokens(targets, c.vocab_size, 2);
  const float scale = 1.0f / (B * T);

  const double loss_whole = whole.stage.forward(whole.params.data(), whole.grads.data(), whole.acts,
                                                whole.scratch, tokens.data(), nullptr,
                                                targets.data(), scale);
  whole.stage.backward(whole.params.data(), whole.grads.data(), whole.acts, whole.scratch,
                       tokens.data(), nullptr, nullptr);

  first.stage.forward(first.params.data(), first.grads.data(), first.acts, first.scratch,
                      tokens.data(), nullptr, nullptr, scale);
  const double loss_split = last.stage.forward(last.params.data(), last.grads.data(), last.acts,
                                               last.scratch, nullptr, first.acts.output(),
                                               targets.data(), scale);
  std::vector<float> boundary_grad(static_cast<std::size_t>(B) * T * c.d_model);
  last.stage.backward(last.params.data(), last.grads.data(), last.acts, last.scratch, nullptr,
                      nullptr, boundary_grad.data());
  first.stage.backward(first.params.data(), first.grads.data(), first.acts, first.scratch,
                       tokens.data(), boundary_grad.data(), nullptr);

  EXPECT_EQ(loss_whole, loss_split);
  EXPECT_GT(loss_whole / (B * T), 0.9 * std::log(97.0));  // an untrained model is near-uniform
  EXPECT_LT(loss_whole / (B * T), 1.1 * std::log(97.0));
  for (const StageHarness* part : {&first, &last})
    for (const ParamEntry& e : part->stage.layout().entries()) {
      if (e.name == "wte") continue;
      ASSERT_EQ(part->tensor(part->grads, e.name), whole.tensor(whole.grads, e.name)) << e.name;
    }
  // The tied embedding's gradient is the sum of the first stage's and the last stage's parts.
  // Not bit-exact: the whole model adds a repeated token's embedding contributions on top of the
  // head's part one by one, the split sums them first; float addition is not associative, so the
  // two differ by a few ulps.
  const auto a = first.tensor(first.grads, "wte"), b = last.tensor(last.grads, "wte"),
             w = whole.tensor(whole.grads, "wte");
  double max_norm = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    ASSERT_NEAR(a[i] + b[i], w[i], 1e-6f * (std::fabs(w[i]) + 1e-3f)) << i;
    max_norm = std::max(max_norm, std::fabs(double(a[i])) + std::fabs(double(b[i])));
  }
  EXPECT_GT(max_norm, 0.0);
}

TEST(GptStage, TrainingForwardAndBackwardAreDeterministic) {
  const GptConfig c = tiny_config();
  const int B = 3, T = 16;
  std::vector<std::int32_t> tokens(B * T), targets(B * T);
  random_tokens(tokens, c.vocab_size, 3);
  random_tokens(targets, c.vocab_size, 4);
  std::vector<float> grads[2];
  double loss[2];
  for (int run = 0; run < 2; ++run) {
    StageHarness h(c, StageRange::whole(c), B, T, 5);
    loss[run] = h.stage.forward(h.params.data(), h.grads.data(), h.acts, h.scratch, tokens.data(),
                                nullptr, targets.data(), 1.0f);
    h.stage.backward(h.params.data(), h.grads.data(), h.acts, h.scratch, tokens.data(), nullptr,
                     nullptr);
    grads[run] = h.grads;
  }
  EXPECT_EQ(loss[0], loss[1]);
  EXPECT_EQ(grads[0], grads[1]);
}

TEST(GptStage, BackwardWithoutTrainingForwardIsAnError) {
  const GptConfig c = tiny_config();
  StageHarness h(c, StageRange::whole(c), 1, 4, 5);
  std::vector<std::int32_t> tokens(4, 1), targets(4, 2);
  h.stage.forward(h.params.data(), nullptr, h.acts, h.scratch, tokens.data(), nullptr,
                  targets.data(), 1.0f);
  EXPECT_THROW(h.stage.backward(h.params.data(), h.grads.data(), h.acts, h.scratch, tokens.data(),
                                nullptr, nullptr),
               std::logic_error);
}

TEST(GptStage, RejectsImpossibleConfigsAndRanges) {
  GptConfig c = tiny_config();
  c.heads = 5;
  EXPECT_THROW(GptStage(c, StageRange::whole(c), testing::cpu_backend(), testing::cpu_stream()), std::invalid_argument);
  c = tiny_config();
  EXPECT_THROW(GptStage(c, {2, 5, false, true}, testing::cpu_backend(), testing::cpu_stream()), std::invalid_argument);
  EXPECT_EQ(c.padded_vocab(), 128);
}

}  // namespace
}  // namespace pipelane
