// GptConfig's size arithmetic: exact for real models, overflow-checked for absurd ones.
#include <gtest/gtest.h>

#include <climits>

#include "model/gpt_config.h"

namespace pipelane {
namespace {

GptConfig config(int layers, int d_model, int heads, int seq_len, int vocab_size) {
  return GptConfig{layers, d_model, heads, seq_len, vocab_size};
}

TEST(GptConfigSizes, TotalParamsAddsLayersAndTables) {
  const GptConfig gpt2 = config(12, 768, 12, 1024, 50257);  // GPT-2 small: 124.4 M with the padded vocab
  EXPECT_EQ(*gpt2.total_params(),
            static_cast<std::uint64_t>(gpt2.non_embedding_params()) + (50304ull + 1024ull) * 768ull);
  EXPECT_EQ(*gpt2.total_params(), 124475904ull);
}

TEST(GptConfigSizes, CountsThatOverflowSixtyFourBitsAreUnknown) {
  EXPECT_FALSE(config(INT_MAX, INT_MAX / 4, 1, 1, 2).total_params());
  EXPECT_TRUE(config(1000000, 128, 4, 128, 256).total_params());
}

TEST(GptConfigSizes, PaddedVocabularyDoesNotOverflowNearIntMax) {
  const GptConfig huge = config(1, 128, 4, 128, INT_MAX);
  EXPECT_EQ(huge.padded_vocab_64(), 2147483648ll);
  EXPECT_NE(huge.problem(), "");
  EXPECT_EQ(huge.problem().rfind("vocab_size (2147483647) must be <= ", 0), 0u) << huge.problem();
  EXPECT_EQ(config(1, INT_MAX / 4 + 1, 1, 1, 2).problem().rfind("d_model (", 0), 0u);
  EXPECT_EQ(config(1, 128, 4, 128, INT_MAX - 64 * 4).problem(), "");
}

TEST(GptConfigSizes, MemoryProblemNamesTheKeyThatMakesTheModelLarge) {
  constexpr std::uint64_t kGiB = 1ull << 30;
  EXPECT_FALSE(config(12, 768, 12, 1024, 50257).memory_problem(16 * kGiB, 1));
  const auto layers = config(1000000, 128, 4, 128, 256).memory_problem(16 * kGiB, 1);
  ASSERT_TRUE(layers);
  EXPECT_EQ(layers->key, "layers");
  // (1e6 x (12 x 128^2 + 13 x 128) + 384 x 128 + 256) parameters x 16 bytes = 2.9 TiB.
  EXPECT_EQ(
      layers->message.rfind("layers = 1000000 (layers 1000000, d_model 128, vocab_size 256) needs 2.9 TiB for "
                            "parameters, gradients and AdamW moments (1.98e+11 parameters x 16 bytes), more "
                            "than 16.0 GiB per rank",
                            0),
      0u)
      << layers->message;
  const auto vocab = config(4, 128, 4, 128, INT_MAX).memory_problem(16 * kGiB, 1);
  ASSERT_TRUE(vocab);
  EXPECT_EQ(vocab->key, "vocab_size");
  const auto width = config(4, 1 << 28, 4, 128, 256).memory_problem(16 * kGiB, 1);
  ASSERT_TRUE(width);
  EXPECT_EQ(width->key, "d_model");  // one layer alone does not fit
  const auto context = config(1, 64, 4, INT_MAX, 256).memory_problem(16 * kGiB, 1);
  ASSERT_TRUE(context);
  EXPECT_EQ(context->key, "seq_len");
}

TEST(GptConfigSizes, MemoryIsSharedByTheRanksThatSplitTheModel) {
  constexpr std::uint64_t kGiB = 1ull << 30;
  const GptConfig deep = config(10000, 128, 4, 128, 256);  // 1,982,769,408 parameters: 29.5 GiB
  EXPECT_TRUE(deep.memory_problem(16 * kGiB, 1));
  EXPECT_FALSE(deep.memory_problem(16 * kGiB, 2));
  EXPECT_NE(
      deep.memory_problem(4 * kGiB, 2)->message.find(", 14.8 GiB on each of 2 ranks, more than 4.0 GiB per rank"),
      std::string::npos)
      << deep.memory_problem(4 * kGiB, 2)->message;
}

}  // namespace
}  // namespace pipelane
