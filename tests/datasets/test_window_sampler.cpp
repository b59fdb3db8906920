#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "datasets/data_error.h"
#include "datasets/window_sampler.h"

namespace pipelane {
namespace {

// Token i has value i, so every token names its own position.
TokenSplit counting_split(std::uint32_t n) {
  TokenSplit split{std::vector<std::uint32_t>(n), {0, n}};
  std::iota(split.tokens.begin(), split.tokens.end(), 0u);
  return split;
}

struct Batch {
  std::vector<std::int32_t> inputs, targets;
  bool operator==(const Batch&) const = default;
};

Batch sample(WindowSampler& sampler, int batch, int seq_len) {
  Batch b{std::vector<std::int32_t>(batch * seq_len), std::vector<std::int32_t>(batch * seq_len)};
  sampler.next_batch(batch, b.inputs.data(), b.targets.data());
  return b;
}

TEST(WindowSampler, SameSeedGivesSameBatchesDifferentSeedDiffers) {
  const TokenSplit split = counting_split(10000);
  WindowSampler a(split, 16, 1234), b(split, 16, 1234), c(split, 16, 1235);
  for (int step = 0; step < 5; ++step) {
    const Batch from_a = sample(a, 4, 16);
    EXPECT_EQ(from_a, sample(b, 4, 16));
    EXPECT_NE(from_a, sample(c, 4, 16));
  }
}

TEST(WindowSampler, TargetsAreInputsShiftedByOneAndWindowsLieInsideTheSplit) {
  const int seq_len = 8;
  const TokenSplit split = counting_split(50);
  WindowSampler sampler(split, seq_len, 99);
  const Batch b = sample(sampler, 64, seq_len);
  for (int row = 0; row < 64; ++row) {
    const std::int32_t start = b.inputs[row * seq_len];
    EXPECT_GE(start, 0);
    EXPECT_LE(start + seq_len, 49);  // the last target is still a token of the split
    for (int t = 0; t < seq_len; ++t) {
      EXPECT_EQ(b.inputs[row * seq_len + t], start + t);
      EXPECT_EQ(b.targets[row * seq_len + t], start + t + 1);
    }
  }
}

TEST(WindowSampler, ReachesEveryStartIncludingTheLast) {
  const TokenSplit split = counting_split(7);  // seq_len 4: starts 0, 1, 2
  WindowSampler sampler(split, 4, 5);
  std::set<std::int32_t> starts;
  for (int i = 0; i < 100; ++i) starts.insert(sample(sampler, 1, 4).inputs[0]);
  EXPECT_EQ(starts, (std::set<std::int32_t>{0, 1, 2}));
}

TEST(WindowSampler, SplitShorterThanOneWindowIsADataError) {
  const TokenSplit split = counting_split(8);
  EXPECT_THROW(WindowSampler(split, 8, 1), DataError);
  EXPECT_NO_THROW(WindowSampler(split, 7, 1));
}

TEST(EvalBatches, CountsNonOverlappingWindows) {
  EXPECT_EQ(eval_window_count(counting_split(10), 3), 3);  // [0..3] [3..6] [6..9]
  EXPECT_EQ(eval_window_count(counting_split(9), 3), 2);
  EXPECT_EQ(eval_window_count(counting_split(3), 3), 0);
  EXPECT_EQ(eval_window_count(TokenSplit{{}, {0}}, 3), 0);
}

TEST(EvalBatches, AreConsecutiveWindowsThatWrapAround) {
  const TokenSplit split = counting_split(10);  // 3 windows of seq_len 3
  std::vector<std::int32_t> inputs(6), targets(6);
  fill_eval_batch(split, 3, 2, 0, inputs.data(), targets.data());
  EXPECT_EQ(inputs, (std::vector<std::int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(targets, (std::vector<std::int32_t>{1, 2, 3, 4, 5, 6}));
  fill_eval_batch(split, 3, 2, 1, inputs.data(), targets.data());  // windows 2 and 0 (wrapped)
  EXPECT_EQ(inputs, (std::vector<std::int32_t>{6, 7, 8, 0, 1, 2}));
  EXPECT_EQ(targets, (std::vector<std::int32_t>{7, 8, 9, 1, 2, 3}));

  std::vector<std::int32_t> again_inputs(6), again_targets(6);
  fill_eval_batch(split, 3, 2, 1, again_inputs.data(), again_targets.data());
  EXPECT_EQ(again_inputs, inputs);
  EXPECT_EQ(again_targets, targets);
}

TEST(EvalBatches, SplitWithoutAWindowIsADataError) {
  std::vector<std::int32_t> inputs(3), targets(3);
  EXPECT_THROW(fill_eval_batch(counting_split(3), 3, 1, 0, inputs.data(), targets.data()), DataError);
}

}  // namespace
}  // namespace pipelane
