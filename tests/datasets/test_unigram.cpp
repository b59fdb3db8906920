#include <gtest/gtest.h>

#include <cmath>

#include "datasets/data_error.h"
#include "datasets/unigram.h"

namespace pipelane {
namespace {

TEST(Unigram, MatchesHandComputedAddOneEstimate) {
  // Counts 2, 1, 0 over vocab 3; N + V = 6, so p = 3/6, 2/6, 1/6.
  const TokenSplit train{{0, 0, 1}, {0, 3}};
  const TokenSplit eval{{0, 2}, {0, 2}};
  const double expected = -(std::log(3.0 / 6.0) + std::log(1.0 / 6.0)) / 2.0;  // ln(12)/2
  EXPECT_NEAR(unigram_cross_entropy(train, eval, 3), expected, 1e-12);
}

TEST(Unigram, EmptyTrainingSplitGivesTheUniformEntropy) {
  const TokenSplit train{{}, {0}};
  const TokenSplit eval{{5, 1, 255}, {0, 3}};
  EXPECT_NEAR(unigram_cross_entropy(train, eval, 256), std::log(256.0), 1e-12);
}

TEST(Unigram, RejectsEmptyEvalAndOutOfVocabTokens) {
  const TokenSplit train{{0, 1}, {0, 2}};
  EXPECT_THROW(unigram_cross_entropy(train, TokenSplit{{}, {0}}, 2), DataError);
  EXPECT_THROW(unigram_cross_entropy(train, TokenSplit{{2}, {0, 1}}, 2), DataError);
}

}  // namespace
}  // namespace pipelane
