// GPT-2 BPE: pre-tokenisation rules, a synthetic vocabulary (no downloads needed), the committed
// fixture of ids from the npm reference encoder (skipped without the tokenizer files), UTF-8 repair.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <nlohmann/json.hpp>

#include "datasets/byte_tokenizer.h"
#include "datasets/data_error.h"
#include "datasets/gpt2_tokenizer.h"
#include "datasets/text_documents.h"
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

// Long pieces merge through a priority queue, short ones by rescanning; both must give GPT-2's
// ids. The rescanning loop is GPT-2's own, so it is the reference here.
TEST(Gpt2Tokenizer, QueueMergesGiveTheIdsOfTheRescanningLoop) {
  const std::string dir = default_gpt2_tokenizer_dir();
  if (!gpt2_tokenizer_files_present(dir))
    GTEST_SKIP() << "no GPT-2 tokenizer files in " << dir << " (run scripts/fetch_gpt2_tokenizer.sh)";
  Gpt2Tokenizer tok = Gpt2Tokenizer::load_dir(dir);
  ASSERT_TRUE(tok.merges_by_queue()) << "GPT-2's merge table should be ordered as learned by BPE";
  std::mt19937 generator(11);
  const std::string letters = "etaoinshrdlucmfwypvbgkjqxz";
  std::vector<std::string> texts;
  for (int length : {32, 33, 100, 1000, 4000}) {
    // One long word from frequent letters (many merges), one of a repeated short pattern (equal
    // ranks overlapping, "aaaa"), and long runs of digits and of symbols.
    std::string word, repeated, digits, symbols;
    for (int i = 0; i < length; ++i) {
      word += letters[generator() % (i % 7 == 0 ? letters.size() : 8)];
      repeated += "ab"[i % 3 == 2];
      digits += static_cast<char>('0' + generator() % 10);
      symbols += "!-=.,*"[generator() % 6];
    }
    texts.insert(texts.end(), {word, " " + word, repeated, std::string(length, 'a'), digits, symbols});
  }
  for (const std::string& text : texts)
    EXPECT_EQ(tok.encode(text), tok.encode_by_rescanning(text)) << "text: " << text.substr(0, 60) << "...";
}

// A merge table that makes a token after a merge uses it cannot merge through the queue (a new
// pair could rank below the merge that made it); it falls back to rescanning.
TEST(Gpt2Tokenizer, UnorderedMergeTableFallsBackToRescanning) {
  ToyVocab ordered;
  EXPECT_TRUE(Gpt2Tokenizer::load_dir(ordered.dir.path().string()).merges_by_queue());
  ToyVocab unordered("#version: 0.2\nhe l\nh e\n");
  Gpt2Tokenizer tok = Gpt2Tokenizer::load_dir(unordered.dir.path().string());
  EXPECT_FALSE(tok.merges_by_queue());
  const std::string long_word(40, 'h');
  EXPECT_EQ(tok.encode("hel" + long_word + "hel"), tok.encode_by_rescanning("hel" + long_word + "hel"));
}

// One word of 1 MB: through the queue it is linear-logarithmic (the rescanning loop took ~56 s).
// Correctness here; the time is in scripts/bench/data_throughput.sh.
TEST(Gpt2Tokenizer, MegabyteWordRoundTrips) {
  const std::string dir = default_gpt2_tokenizer_dir();
  if (!gpt2_tokenizer_files_present(dir)) GTEST_SKIP() << "no GPT-2 tokenizer files in " << dir;
  Gpt2Tokenizer tok = Gpt2Tokenizer::load_dir(dir);
  std::mt19937 generator(5);
  std::string word;
  for (int i = 0; i < (1 << 20); ++i) word += static_cast<char>('a' + generator() % 26);
  const std::vector<std::uint32_t> ids = tok.encode(word);
  EXPECT_LT(ids.size(), word.size() * 2 / 3);  // merges happened (random letters merge little)
  EXPECT_EQ(tok.decode(ids), word);
}

// Text that exercises GPT-2's rules next to spaces and line breaks: contractions, runs of
// whitespace of every kind, symbols, digits, non-ASCII letters and spaces, invalid UTF-8.
std::string tricky_text(std::uint32_t seed, int pieces) {
  const char* parts[] = {"word", " ", "\n", "  ", "\n\n", "\t", "\r\n", "'s", "'ll", "'", "it's", "123", " 45",
                         "!?", "...", "caf\xC3\xA9", "\xC2\xA0", "\xE2\x80\x83", "\xFF", "\xE2\x82", " x", "x ",
                         "\u00e9t\u00e9", "\xF0\x9F\x98\x80", "-", "A", "z"};
  std::mt19937 generator(seed);
  std::string text;
  for (int i = 0; i < pieces; ++i) text += parts[generator() % (sizeof parts / sizeof *parts)];
  return text;
}

// Ids of `text` encoded in pieces cut at every `every`-th position the rule allows, each piece
// repaired on its own, as prepare-data does with segments.
template <typename Encode>
std::vector<std::uint32_t> encode_cut(std::string_view text, bool (*can_cut)(std::string_view, std::size_t),
                                      std::size_t every, Encode&& encode) {
  std::vector<std::uint32_t> ids;
  std::size_t start = 0, allowed = 0;
  for (std::size_t p = 1; p <= text.size(); ++p) {
    if (p < text.size() && !(can_cut(text, p) && ++allowed % every == 0)) continue;
    encode(repair_utf8(text.substr(start, p - start), InvalidUtf8::kReplace, "t"), ids);
    start = p;
  }
  return ids;
}

TEST(CutRules, CuttingWhereTheByteTokenizerAllowsKeepsIdsAndRepair) {
  const std::string text = tricky_text(1, 5000);
  const ByteTokenizer bytes;
  const auto encode = [&](const std::string& piece, std::vector<std::uint32_t>& ids) {
    bytes.encode_append(piece, ids);
  };
  const std::vector<std::uint32_t> whole = bytes.encode(repair_utf8(text, InvalidUtf8::kReplace, "t"));
  for (const std::size_t every : {1, 3, 50}) EXPECT_EQ(encode_cut(text, &ByteTokenizer::can_cut, every, encode), whole);
}

TEST(CutRules, CuttingWhereGpt2AllowsKeepsIds) {
  const std::string dir = default_gpt2_tokenizer_dir();
  if (!gpt2_tokenizer_files_present(dir)) GTEST_SKIP() << "no GPT-2 tokenizer files in " << dir;
  Gpt2Tokenizer tok = Gpt2Tokenizer::load_dir(dir);
  const auto encode = [&](const std::string& piece, std::vector<std::uint32_t>& ids) { tok.encode_append(piece, ids); };
  std::vector<std::string> texts = {tricky_text(2, 20000), tricky_text(3, 20000)};
  const std::string corpus = "/usr/share/doc/jargon-text/jargon.txt.gz";
  if (std::filesystem::exists(corpus)) texts.push_back(read_text_file(corpus));
  for (const std::string& text : texts) {
    const std::vector<std::uint32_t> whole = tok.encode(repair_utf8(text, InvalidUtf8::kReplace, "t"));
    for (const std::size_t every : {1, 7}) EXPECT_EQ(encode_cut(text, &Gpt2Tokenizer::can_cut, every, encode), whole);
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
