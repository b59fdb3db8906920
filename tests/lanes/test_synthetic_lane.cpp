// The synthetic lane of scripts/bench/lane_cost.sh: a step is its busy time over its working set
// (from the arena: a set over the quota is refused), step_us = 0 does nothing, and its progress
// survives save/load.
#include <gtest/gtest.h>

#include <chrono>

#include "lanes/builtin/builtin_lanes.h"
#include "tests/lanes/builtin_io_test_env.h"

namespace pipelane {
namespace {

using testing_io::LaneEnv;

double step_ms(Lane& lane, LaneContext& ctx, double* units) {
  const auto t0 = std::chrono::steady_clock::now();
  *units = lane.step(ctx);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

TEST(SyntheticLane, AStepIsItsBusyTimeOverItsWorkingSet) {
  LaneEnv env("synthetic", {{"step_us", "3000"}, {"working_set_kb", "1024"}, {"steps", "2"}});
  auto lane = builtin_lane_factories().at("synthetic")();
  lane->setup(env.ctx);
  double units = 0;
  EXPECT_GE(step_ms(*lane, env.ctx, &units), 3.0);  // at least its busy time, whatever the machine
  EXPECT_GE(units, 3000.0);
  EXPECT_FALSE(lane->finished());
  (void)step_ms(*lane, env.ctx, &units);
  EXPECT_TRUE(lane->finished());
  EXPECT_EQ(lane->report()["working_set_kb"].get<int>(), 1024);
}

TEST(SyntheticLane, ZeroBusyTimeDoesNothing) {
  LaneEnv env("synthetic", {{"step_us", "0"}});
  auto lane = builtin_lane_factories().at("synthetic")();
  lane->setup(env.ctx);
  double units = -1;
  EXPECT_LT(step_ms(*lane, env.ctx, &units), 3.0);  // a clock read, not a busy loop
  EXPECT_LT(units, 1000.0);
}

TEST(SyntheticLane, ProgressSurvivesSaveAndLoad) {
  LaneEnv env("synthetic", {{"step_us", "100"}, {"steps", "3"}});
  auto a = builtin_lane_factories().at("synthetic")();
  a->setup(env.ctx);
  a->step(env.ctx);
  a->step(env.ctx);
  auto b = builtin_lane_factories().at("synthetic")();
  LaneEnv env_b("synthetic", {{"step_us", "100"}, {"steps", "3"}});
  b->setup(env_b.ctx);
  b->load(a->save());
  EXPECT_FALSE(b->finished());
  b->step(env_b.ctx);
  EXPECT_TRUE(b->finished());
}

TEST(SyntheticLane, AWorkingSetOverTheQuotaIsRefusedAtSetup) {
  LaneEnv env("synthetic", {{"working_set_kb", "4194304"}});  // 4 GiB
  auto lane = builtin_lane_factories().at("synthetic")();
  EXPECT_ANY_THROW(lane->setup(env.ctx));
}

}  // namespace
}  // namespace pipelane
