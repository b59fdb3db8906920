#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/adamw.h"
#include "model/lr_schedule.h"
#include "tests/support/cpu_backend_fixture.h"

namespace pipelane {
namespace {

TEST(LrSchedule, WarmsUpLinearlyThenDecaysByCosineToTheFloor) {
  LrSchedule s{1e-3, 1e-4, 10, 110};
  EXPECT_DOUBLE_EQ(s.at(0), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(9), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(10), 1e-3);
  EXPECT_NEAR(s.at(60), 0.5 * (1e-3 + 1e-4), 1e-12);  // half way through the decay
  EXPECT_NEAR(s.at(110), 1e-4, 1e-12);
  EXPECT_NEAR(s.at(500), 1e-4, 1e-12);  // past the end it stays at the floor
  for (int i = 11; i < 110; ++i) ASSERT_LE(s.at(i), s.at(i - 1));
}

TEST(Clipping, MatchesClipGradNormSemantics) {
  EXPECT_EQ(clip_scale(0.5, 1.0f), 1.0f);
  EXPECT_FLOAT_EQ(clip_scale(4.0, 1.0f), 1.0f / (4.0f + 1e-6f));
  EXPECT_EQ(clip_scale(100.0, 0.0f), 1.0f);  // 0 turns clipping off
}

TEST(AdamW, DecaysOnlyMatricesAndEmbeddings) {
  GptConfig c;
  c.layers = 1;
  c.d_model = 8;
  c.heads = 2;
  c.max_seq_len = 4;
  c.vocab_size = 10;
  ParamLayout layout(c, StageRange::whole(c));
  std::vector<float> p(layout.total_floats(), 1.0f), g(layout.total_floats(), 0.0f),
      m(layout.total_floats(), 0.f), v(layout.total_floats(), 0.f);
  AdamWConfig cfg;
  cfg.weight_decay = 0.5f;
  adamw_step(layout, p.data(), g.data(), m.data(), v.data(), cfg, 0.1f, 1, 1.0f, testing::cpu_backend(), testing::cpu_stream());
  // Zero gradient: only decay moves a parameter, by the factor (1 - lr * wd).
  EXPECT_FLOAT_EQ(p[layout.find("h.0.attn.c_attn.weight")->offset], 0.95f);
  EXPECT_FLOAT_EQ(p[layout.find("wte")->offset], 0.95f);
  EXPECT_EQ(p[layout.find("h.0.attn.c_attn.bias")->offset], 1.0f);
  EXPECT_EQ(p[layout.find("ln_f.weight")->offset], 1.0f);
  EXPECT_EQ(grad_sum_squares(layout, g.data(), testing::cpu_backend(), testing::cpu_stream()), 0.0);
  g[layout.find("ln_f.bias")->offset] = 3.0f;
  g[layout.find("wpe")->offset + 1] = 4.0f;
  EXPECT_EQ(grad_sum_squares(layout, g.data(), testing::cpu_backend(), testing::cpu_stream()), 25.0);
}

}  // namespace
}  // namespace pipelane
