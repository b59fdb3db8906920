// The whole C++ model against PyTorch (tests/golden/make_gpt2_golden.py): logits, loss, every
// parameter gradient, and the losses of ten AdamW steps with clipping, from the same initial weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "model/adamw.h"
#include "model/gpt_model.h"
#include "tests/golden/golden_file.h"
#include "tests/support/cpu_backend_fixture.h"

namespace pipelane {
namespace {

using golden::GoldenFile;

// Relative error of a tensor as a whole: max |a - b| / max |b|. Per-element ratios are meaningless
// for entries near zero.
double relative_error(const float* a, const float* b, std::size_t n) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

struct GoldenModel {
  GoldenFile g = GoldenFile::load("tests/golden/gpt2_tiny.bin");
  GptConfig cfg;
  int B, T, steps;
  std::unique_ptr<GptStage> stage;
  std::unique_ptr<Arena> arena;
  std::vector<float> params, grads;
  MicrobatchActivations acts;
  StageScratch scratch;

  GoldenModel() {
    const auto& c = g.at("config").i32;
    cfg.layers = c[0];
    cfg.d_model = c[1];
    cfg.heads = c[2];
    cfg.max_seq_len = c[3];
    cfg.vocab_size = c[4];
    B = c[5];
    T = c[6];
    steps = c[7];
    stage = std::make_unique<GptStage>(cfg, StageRange::whole(cfg), testing::cpu_backend(), testing::cpu_stream());
    arena = std::make_unique<Arena>("golden", stage->activation_bytes(B, T) + stage->scratch_bytes(B, T));
    acts = stage->allocate_activations(*arena, B, T);
    scratch = stage->allocate_scratch(*arena, B, T);
    params.assign(stage->layout().total_floats(), 0.f);
    grads.assign(stage->layout().total_floats(), 0.f);
    // PyTorch's wte is [V, C]; ours is padded to [Vp, C] with zero rows, so copying by the
    // golden tensor's size fills exactly the real rows.
    for (const ParamEntry& e : stage->layout().entries()) {
      const auto& src = g.at("param/" + e.name).f32;
      EXPECT_LE(src.size(), e.numel) << e.name;
      std::memcpy(params.data() + e.offset, src.data(), src.size() * sizeof(float));
    }
  }
  double forward_backward() {
    std::fill(grads.begin(), grads.end(), 0.f);
    const float scale = 1.0f / (B * T);
    const double sum = stage->forward(params.data(), grads.data(), acts, scratch,
                                      g.at("inputs").i32.data(), nullptr, g.at("targets").i32.data(),
                                      scale);
    stage->backward(params.data(), grads.data(), acts, scratch, g.at("inputs").i32.data(), nullptr,
                    nullptr);
    return sum / (B * T);
  }
};

TEST(Gpt2Golden, LogitsLossAndEveryGradientMatchPyTorch) {
  GoldenModel m;
  const double loss = m.forward_backward();
  // fp32 throughout on both sides; only the summation order differs (sgemm blocking, our
  // per-row loops vs PyTorch's kernels), which moves results by a few ulps of the largest terms.
  EXPECT_NEAR(loss, m.g.at("loss").f32[0], 1e-5 * std::fabs(m.g.at("loss").f32[0]));

  const int V = m.cfg.vocab_size, Vp = m.cfg.padded_vocab();
  std::vector<float> logits(static_cast<std::size_t>(m.B) * m.T * Vp), real;
  m.stage->logits(m.params.data(), m.acts, logits.data());
  for (int n = 0; n < m.B * m.T; ++n)
    real.insert(real.end(), logits.begin() + static_cast<std::ptrdiff_t>(n) * Vp,
                logits.begin() + static_cast<std::ptrdiff_t>(n) * Vp + V);
  EXPECT_LT(relative_error(real.data(), m.g.at("logits").f32.data(), real.size()), 1e-5);

  for (const ParamEntry& e : m.stage->layout().entries()) {
    const auto& ref = m.g.at("grad/" + e.name).f32;
    const float* ours = m.grads.data() + e.offset;
    // 1e-4: gradients pass through up to 2 layers of backward products on top of the forward's
    // rounding; observed errors are ~1e-6, so this still catches any real mistake (a wrong
    // term is off by O(1)).
    EXPECT_LT(relative_error(ours, ref.data(), ref.size()), 1e-4) << e.name;
    for (std::size_t i = ref.size(); i < e.numel; ++i)
      ASSERT_EQ(ours[i], 0.f) << e.name << ": padded vocabulary rows must get no gradient";
  }
}

TEST(Gpt2Golden, TenAdamWStepsWithClippingMatchPyTorch) {
  GoldenModel m;
  const auto& h = m.g.at("hparams").f32;  // lr, beta1, beta2, eps, weight_decay, grad_clip
  const auto& ref = m.g.at("losses").f32;
  ASSERT_EQ(static_cast<int>(ref.size()), m.steps);
  const AdamWConfig cfg{h[1], h[2], h[3], h[4]};
  std::vector<float> mom(m.params.size(), 0.f), var(m.params.size(), 0.f);
  bool clipped = false;
  for (int step = 0; step < m.steps; ++step) {
    const double loss = m.forward_backward();
    EXPECT_NEAR(loss, ref[step], 1e-5 * std::fabs(ref[step])) << "step " << step;
    const double norm = std::sqrt(grad_sum_squares(m.stage->layout(), m.grads.data(), testing::cpu_backend(), testing::cpu_stream()));
    const float scale = clip_scale(norm, h[5]);
    clipped |= scale < 1.0f;
    adamw_step(m.stage->layout(), m.params.data(), m.grads.data(), mom.data(), var.data(), cfg, h[0],
               step + 1, scale, testing::cpu_backend(), testing::cpu_stream());
  }
  EXPECT_LT(ref[m.steps - 1], ref[0]);  // the reference itself learned something
}

}  // namespace
}  // namespace pipelane
