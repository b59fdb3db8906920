// GPT-2 BPE: pre-tokenisation rules, a synthetic vocabulary (no downloads needed), the committed
// fixture of ids from the npm reference encoder (skipped without the tokenizer files), UTF-8 repair.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "datasets/data_error.h"
#include "datasets/gpt2_tokenizer.h"
#include "tests/datasets/test_files.h"

namespace pipelane {
namespace {

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  gpt2_pretokenize(text, [&](std::string_view p) { out.emplace_back(p); });
  return out;
}

using V = std::vector<std::string>;

TEST(Gpt2Pretokenize, FollowsGpt2Pattern) {
  EXPECT_EQ(pieces("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(pieces("I'm here's"), (V{"I", "'m", " here", "'s"}));
  EXPECT_EQ(pieces("abc123 45"), (V{"abc", "123", " 45"}));
  EXPECT_EQ(pieces("hi!? ..."), (V{"hi", "!?", " ..."}));
  // A whitespace run before text leaves its last space to the next piece; at the end it stays whole.
  EXPECT_EQ(pieces("a   b  "), (V{"a", "  ", " b", "  "}));
  EXPECT_EQ(pieces("x\n\ny"), (V{"x", "\n", "\n", "y"}));
  EXPECT_EQ(pieces("\ty"), (V{"\t", "y"}));
  EXPECT_EQ(pieces("café ½"), (V{"café", " ½"}));          // é is a letter, ½ a number
  EXPECT_EQ(pieces("a\u00a0b"), (V{"a", "\u00a0", "b"}));  // NBSP is \s in JavaScript
  EXPECT_TRUE(pieces("").empty());
}

// encoder.json / vocab.bpe for a toy vocabulary: the 256 byte tokens plus merges of "h e", "he l".
struct ToyVocab {
  test_support::TempDir dir;
  ToyVocab(const std::string& merges_text = "#version: 0.2\nh e\nhe l\n") {
    nlohmann::json encoder = nlohmann::json::object();
    int shifted = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
      const char32_t c = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + shifted++);
      std::string key;
      if (c < 0x80) key += static_cast<char>(c);
      else { key += static_cast<char>(0xc0 | (c >> 6)); key += static_cast<char>(0x80 | (c & 0x3f)); }
      encoder[key] = b;
    }
    encoder["he"] = 256;
    encoder["hel"] = 257;
    encoder["<|endoftext|>"] = 258;
    test_support::write_file(dir.file("encoder.json"), encoder.dump());
    test_support::write_file(dir.file("vocab.bpe"), merges_text);
  }
};

TEST(Gpt2Tokenizer, AppliesMergesByRankAndRoundTrips) {
  ToyVocab toy;
  Gpt2Tokenizer tok = Gpt2Tokenizer::load_dir(toy.dir.path().string());
  EXPECT_EQ(tok.vocab_size(), 259u);
  EXPECT_EQ(tok.end_of_text(), 258u);
  EXPECT_EQ(tok.encode("hello"), (std::vector<std::uint32_t>{257, 'l', 'o'}));
  EXPECT_EQ(tok.encode("hehe"), (std::vector<std::uint32_t>{256, 256}));
  const std::string text = "hello, \xc3\xa9 world\n";
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
  EXPECT_THROW(tok.decode({259}), DataError);
}

TEST(Gpt2Tokenizer, BadFilesAreOneLineErrors) {
  test_support::TempDir empty;
  EXPECT_THROW(Gpt2Tokenizer::load_dir(empty.path().string()), DataError);
  ToyVocab bad_merge("#version: 0.2\nh e\nq z\n");
  try {
    Gpt2Tokenizer::load_dir(bad_merge.dir.path().string());
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("vocab.bpe:3"), std::string::npos) << e.what();
  }
  ToyVocab broken_json;
  test_support::write_file(broken_json.dir.file("encoder.json"), "{\"a\": 0,");
  EXPECT_THROW(Gpt2Tokenizer::load_dir(broken_json.dir.path().string()), DataError);
}

// The committed fixture holds ids from the npm package's JavaScript encoder.
TEST(Gpt2Tokenizer, MatchesReferenceFixture) {
  const std::string dir = default_gpt2_tokenizer_dir();
  if (!gpt2_tokenizer_files_present(dir))
    GTEST_SKIP() << "no GPT-2 tokenizer files in " << dir << " (run scripts/fetch_gpt2_tokenizer.sh)";
  Gpt2Tokenizer tok = Gpt2Tokenizer::load_dir(dir);
  EXPECT_EQ(tok.vocab_size(), 50257u);
  std::ifstream in("tests/datasets/gpt2_fixture.json");
  ASSERT_TRUE(in) << "run from the source root";
  const nlohmann::json fixture = nlohmann::json::parse(in);
  ASSERT_GT(fixture.size(), 30u);
  for (const auto& entry : fixture) {
    const std::string text = entry["text"];
    EXPECT_EQ(tok.encode(text), entry["ids"].get<std::vector<std::uint32_t>>()) << "text: " << text;
    EXPECT_EQ(tok.decode(tok.encode(text)), text);
  }
}

TEST(Utf8, ReplacesMaximalSubpartsOrFails) {
  EXPECT_EQ(find_invalid_utf8("ok \xc3\xa9"), std::string::npos);
  EXPECT_EQ(find_invalid_utf8("ab\xff"), 2u);
  // Truncated 3-byte sequence: one U+FFFD for both bytes; a lone continuation byte: one each.
  EXPECT_EQ(repair_utf8("a\xe2\x82z\x80", InvalidUtf8::kReplace, "t"), "a\xEF\xBF\xBDz\xEF\xBF\xBD");
  EXPECT_EQ(repair_utf8("\xed\xa0\x80", InvalidUtf8::kReplace, "t"),  // a surrogate: 3 replacements
            "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  try {
    repair_utf8("abc\xc0", InvalidUtf8::kFail, "f.txt");
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("f.txt: invalid UTF-8 at byte 3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_invalid_utf8("ignore"), DataError);
}

}  // namespace
}  // namespace pipelane
