// The lane fit rule shared by the gap scheduler and the simulator (parallel/gap_fit).
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "parallel/gap_fit.h"

namespace pipelane {
namespace {

std::function<std::optional<double>(std::size_t)> costs(std::vector<std::optional<double>> c) {
  return [c](std::size_t i) { return c[i]; };
}

TEST(GapFit, RoundRobinFromTheCursorTakesTheFirstLaneThatFits) {
  const auto cost = costs({0.5, 0.2, 0.3});
  GapFitChoice c = next_fitting_step(3, 1, 0.0, 1.0, cost);
  ASSERT_TRUE(c.found);
  EXPECT_EQ(c.lane, 1u);
  EXPECT_EQ(c.cursor, 2u);
  c = next_fitting_step(3, 2, 0.0, 1.0, cost);
  EXPECT_EQ(c.lane, 2u);
  EXPECT_EQ(c.cursor, 0u);  // wraps
}

TEST(GapFit, SkipsLanesThatDoNotFitOrMayNotRun) {
  // Lane 0 may not run, lane 1 does not fit what is left (0.7 + 0.5 > 1.0), lane 2 does (0.7 + 0.3).
  const GapFitChoice c = next_fitting_step(3, 0, 0.7, 1.0, costs({std::nullopt, 0.5, 0.3}));
  ASSERT_TRUE(c.found);
  EXPECT_EQ(c.lane, 2u);
  EXPECT_EQ(c.cursor, 0u);
}

TEST(GapFit, ExactFitCountsAndNothingFittingKeepsTheCursor) {
  EXPECT_TRUE(next_fitting_step(1, 0, 0.5, 1.0, costs({0.5})).found);  // elapsed + cost == budget fits
  const GapFitChoice none = next_fitting_step(2, 1, 0.9, 1.0, costs({0.2, 0.3}));
  EXPECT_FALSE(none.found);
  EXPECT_EQ(none.cursor, 1u);
  EXPECT_FALSE(next_fitting_step(0, 0, 0.0, 1.0, costs({})).found);
}

TEST(GapFit, BudgetIsThePredictedGapTimesTheMargin) { EXPECT_DOUBLE_EQ(gap_budget(2.0, 0.9), 1.8); }

}  // namespace
}  // namespace pipelane
