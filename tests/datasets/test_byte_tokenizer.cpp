#include <gtest/gtest.h>

#include "datasets/byte_tokenizer.h"
#include "datasets/data_error.h"

namespace pipelane {
namespace {

TEST(ByteTokenizer, RoundTripsEveryByteValue) {
  std::string text;
  for (int b = 0; b < 256; ++b) text.push_back(static_cast<char>(b));
  text += "h\xC3\xA9llo \xE2\x9C\x93";  // UTF-8 "héllo ✓"
  const ByteTokenizer tokenizer;
  const std::vector<std::uint32_t> ids = tokenizer.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[b], static_cast<std::uint32_t>(b));
  EXPECT_EQ(tokenizer.decode(ids), text);
}

TEST(ByteTokenizer, NonAsciiBytesBecomeHighIds) {
  const ByteTokenizer tokenizer;
  EXPECT_EQ(tokenizer.encode("\xC3\xA9"), (std::vector<std::uint32_t>{0xC3, 0xA9}));
  EXPECT_EQ(tokenizer.encode(""), std::vector<std::uint32_t>{});
}

TEST(ByteTokenizer, DecodeRejectsIdsOutsideTheVocabulary) {
  const ByteTokenizer tokenizer;
  EXPECT_THROW(tokenizer.decode({65, 256}), DataError);
}

}  // namespace
}  // namespace pipelane
