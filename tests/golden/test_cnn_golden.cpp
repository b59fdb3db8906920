// The CNN lanes' networks (lanes/builtin/cnn/) against make_cnn_golden.py's PyTorch reference:
// two SGD-with-momentum steps of resnet18, resnet50 and vgg19 at width_divisor 8 from the same
// initial values and synthetic images, the reference in float64.
//
// Tolerance: our float32 result differs from the exact one by rounding alone. A K-term fp32 sum
// typically errs by about sqrt(K) * u (u = 2^-24; the worst case K * u is not reached by sums of
// mixed signs), and a step's error compounds over the L weight layers it passes through, forward
// and backward; batch norm keeps every layer's values O(1). So we allow
//     10 * L * sqrt(K_max) * u   relative to the tensor's largest value,
// K_max the longest dot product (3x3 x 64 channels = 576 in the resnets; vgg19's first classifier
// layer, 64 x 7 x 7 = 3136), L the weight layers (21, 54, 19): 3.0e-4, 7.7e-4, 6.3e-4. PyTorch's
// own float32 run is 1e-7 to 5e-6 from the reference (make_cnn_golden.py --compare-fp32); a wrong
// formula (batch norm's variance, a stride, a transposed weight) is off by 1e-2 or more.
// Parameters are compared as their change over the two steps (value - initial value), which is
// what the optimizer computed; the initial values are the reference's bit for bit (cnn_init.h).
// The change is small next to the value, so our float32 value's rounding in each update (up to u
// times the value) is added to that tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "lanes/builtin/cnn/cnn_init.h"
#include "lanes/builtin/cnn/cnn_models.h"
#include "lanes/builtin/cnn/cnn_trainer.h"
#include "lanes/builtin/cnn/image_source.h"
#include "runtime/cpu/cpu_backend.h"
#include "tests/golden/golden_file.h"

namespace pipelane {
namespace {

using namespace cnn;

constexpr double kUnitRoundoff = 0x1p-24;

struct Case {
  const char* arch;
  int weight_layers;
  int longest_dot;
};

double tolerance(const Case& c) { return 10.0 * c.weight_layers * std::sqrt(double(c.longest_dot)) * kUnitRoundoff; }

// A network, its buffers in an arena and a trainer over the synthetic images, as the lane sets up.
struct Fixture {
  explicit Fixture(const golden::GoldenFile& g) {
    const std::vector<std::int32_t>& cfg = g.at("config").i32;
    const char* archs[] = {"resnet18", "resnet50", "vgg19"};
    config.arch = archs[cfg[0]];
    config.batch = cfg[1];
    config.image_size = cfg[2];
    config.classes = cfg[3];
    config.width_divisor = cfg[4];
    config.dropout = 0;  // PyTorch draws its own masks
    config.zero_init_residual = cfg[7] != 0;
    seed = static_cast<std::uint64_t>(cfg[5]);
    const std::vector<float>& h = g.at("hparams").f32;
    net = build_cnn(config);
    source = make_synthetic_source(config.image_size, config.classes, 1 << 20, seed);
    // A small block budget: the step is cut into many blocks, as in a lane.
    trainer = std::make_unique<CnnTrainer>(
        *net, *backend, *stream, SgdSettings{h[0], h[1], h[2]}, 2e5, synthetic_cost_per_image(config.image_size),
        [this](std::int64_t p, float* px, std::int32_t* label) { source->load(p, px, label); }, seed);
    BufferPlan plan;
    net->plan_buffers(plan);
    trainer->plan_buffers(plan);
    arena = std::make_unique<Arena>("cnn", plan.bytes(Arena::kDefaultAlignment));
    plan.allocate(*arena);
    net->initialise(seed);
  }
  // Runs ops until the step's update ops are next: its gradients are complete.
  void run_to_update() {
    do trainer->run(0);
    while (trainer->cursor() != trainer->program().first_update);
  }
  void run_to_step_end() {
    do trainer->run(0);
    while (!trainer->at_step_start());
  }

  std::unique_ptr<Backend> backend = make_cpu_backend(1);
  std::unique_ptr<Stream> stream = backend->create_stream(StreamPriority::Low);
  CnnModelConfig config;
  std::uint64_t seed = 0;
  std::unique_ptr<CnnNetwork> net;
  std::unique_ptr<ImageSource> source;
  std::unique_ptr<CnnTrainer> trainer;
  std::unique_ptr<Arena> arena;
};

// A parameter's values (or initial values) in torch's layout.
std::vector<float> torch_layout(const CnnParam& p, const float* ours) {
  std::vector<float> out(p.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = ours[p.index_of_torch(i)];
  return out;
}

class CnnGolden : public ::testing::TestWithParam<Case> {};

TEST_P(CnnGolden, TwoTrainingStepsMatchPyTorch) {
  const Case c = GetParam();
  const double tol = tolerance(c);
  const auto g = golden::GoldenFile::load(std::string("tests/golden/cnn_") + c.arch + ".bin");
  Fixture f(g);
  ASSERT_EQ(f.config.arch, c.arch);
  std::map<std::string, std::vector<float>> initial;
  for (const CnnParam& p : f.net->params()) initial[p.name] = torch_layout(p, p.value);

  f.run_to_update();
  const golden::Record& logits = g.at("logits");
  ASSERT_EQ(static_cast<std::size_t>(logits.numel()), f.net->logits->size());
  EXPECT_LT(golden::relative_error(f.net->logits->value, logits.f32.data(), logits.f32.size()), tol) << "logits";
  int grads = 0;
  for (const golden::Record& r : g.records()) {
    if (r.name.rfind("grad/", 0) != 0) continue;
    const CnnParam* p = f.net->find_param(r.name.substr(5));
    ASSERT_NE(p, nullptr) << r.name;
    ASSERT_EQ(static_cast<std::size_t>(r.numel()), p->size()) << r.name;
    const std::vector<float> ours = torch_layout(*p, p->grad);
    EXPECT_LT(golden::relative_error(ours.data(), r.f32.data(), ours.size()), tol) << r.name;
    ++grads;
  }
  EXPECT_GE(grads, 8);

  f.run_to_step_end();
  f.run_to_step_end();
  ASSERT_EQ(f.trainer->steps_done(), 2);
  int updates = 0;
  const std::vector<float>& losses = g.at("losses").f32;
  for (int s = 0; s < 2; ++s)
    EXPECT_NEAR(f.trainer->losses()[s], losses[s], tol * std::fabs(losses[s])) << "loss of step " << s + 1;
  for (const golden::Record& r : g.records()) {
    if (r.name.rfind("update/", 0) == 0) {
      const CnnParam* p = f.net->find_param(r.name.substr(7));
      ASSERT_NE(p, nullptr) << r.name;
      const std::vector<float> ours = torch_layout(*p, p->value), &start = initial[p->name];
      std::vector<float> delta(ours.size());
      double largest_value = 0, largest_update = 0;
      for (std::size_t i = 0; i < ours.size(); ++i) {
        delta[i] = ours[i] - start[i];  // exact (Sterbenz): the two are within a factor 2
        largest_value = std::max(largest_value, std::fabs(double(ours[i])));
        largest_update = std::max(largest_update, std::fabs(double(r.f32[i])));
      }
      // Each of our two updates rounds the float32 parameter to nearest: up to u times its value
      // each, which is large next to a small update (a hard bound, not an estimate).
      const double rounding = largest_update > 0 ? 2 * kUnitRoundoff * largest_value / largest_update : 0;
      EXPECT_LT(golden::relative_error(delta.data(), r.f32.data(), delta.size()), tol + rounding) << r.name;
      ++updates;
    } else if (r.name.rfind("buffer/", 0) == 0) {
      const CnnBuffer* b = f.net->find_buffer(r.name.substr(7));
      ASSERT_NE(b, nullptr) << r.name;
      ASSERT_EQ(static_cast<std::size_t>(r.numel()), b->size) << r.name;
      EXPECT_LT(golden::relative_error(b->value, r.f32.data(), b->size), tol) << r.name;
    }
  }
  EXPECT_GE(updates, 8);
}

INSTANTIATE_TEST_SUITE_P(Models, CnnGolden,
                         ::testing::Values(Case{"resnet18", 21, 576}, Case{"resnet50", 54, 576},
                                           Case{"vgg19", 19, 3136}),
                         [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.arch); });

// The initial values are the reference's, bit for bit: what makes the comparison above one of
// arithmetic alone. (The golden file keeps no initial values; cnn_reference.py draws the same
// ones: here a few against values computed by hand from cnn_random.h's definition.)
TEST(CnnInit, UniformDrawsHaveTheSchemesStandardDeviation) {
  CnnParam conv;
  conv.name = "conv1.weight";
  conv.torch_shape = {64, 3, 7, 7};
  conv.channels = 3;
  conv.spatial = 49;
  conv.init = ParamInit::ConvKaimingFanOut;
  conv.fan = 64 * 49;
  double sum = 0, sq = 0;
  const std::size_t n = conv.size();
  for (std::size_t i = 0; i < n; ++i) {
    const double v = initial_value(conv, 7, i);
    sum += v;
    sq += v * v;
  }
  const double expected_std = std::sqrt(2.0 / conv.fan);
  EXPECT_NEAR(sum / n, 0.0, 4 * expected_std / std::sqrt(double(n)));
  EXPECT_NEAR(std::sqrt(sq / n), expected_std, 0.05 * expected_std);  // 9408 draws: ~1% sampling error
  // Our layout is channels last: torch element (oc, ic, kh, kw) sits at ((oc*7 + kh)*7 + kw)*3 + ic.
  EXPECT_EQ(conv.index_of_torch(((5 * 3 + 2) * 7 + 4) * 7 + 6), static_cast<std::size_t>(((5 * 7 + 4) * 7 + 6) * 3 + 2));
}

}  // namespace
}  // namespace pipelane
