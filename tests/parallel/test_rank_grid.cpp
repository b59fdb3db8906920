#include <gtest/gtest.h>

#include <set>

#include "parallel/pipeline_executor.h"
#include "parallel/rank_grid.h"

namespace pipelane {
namespace {

TEST(RankGrid, TensorParallelVariesFastestThenDataThenPipeline) {
  const RankGrid g({2, 3, 4});  // tp 2, dp 3, pp 4
  EXPECT_EQ(g.rank_of({1, 0, 0}), 1);
  EXPECT_EQ(g.rank_of({0, 1, 0}), 2);
  EXPECT_EQ(g.rank_of({0, 0, 1}), 6);
  std::set<int> seen;
  for (int r = 0; r < 24; ++r) {
    const RankCoords c = g.coords(r);
    EXPECT_EQ(g.rank_of(c), r);
    seen.insert(r);
  }
  EXPECT_EQ(seen.size(), 24u);
  EXPECT_EQ(g.describe(7), "rank 7 (tp 1/2, dp 0/3, pp 1/4)");
}

TEST(SplitLayers, EvenlyOrExplicitlyWithEmbeddingFirstAndHeadLast) {
  const auto even = split_layers(8, 2, 2, "");
  ASSERT_EQ(even.size(), 4u);
  EXPECT_EQ(even[1].first_layer, 2);
  EXPECT_EQ(even[1].last_layer, 4);
  EXPECT_TRUE(even[0].has_embedding);
  EXPECT_FALSE(even[0].has_head);
  EXPECT_TRUE(even[3].has_head);
  const auto uneven = split_layers(5, 2, 1, "3,2");
  EXPECT_EQ(uneven[0].last_layer, 3);
  EXPECT_EQ(uneven[1].first_layer, 3);
  EXPECT_THROW(split_layers(5, 2, 1, ""), std::invalid_argument);
  EXPECT_THROW(split_layers(5, 2, 1, "3,3"), std::invalid_argument);
  EXPECT_THROW(split_layers(5, 2, 1, "3,x"), std::invalid_argument);
}

}  // namespace
}  // namespace pipelane
