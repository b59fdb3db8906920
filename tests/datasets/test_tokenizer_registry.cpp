// The tokenizers behind TokenizerRegistry without node: the hand-written pre-tokenizers against
// node's regex engine (pretokenize_fixture.json), tokenizer.json reading and refusals on small
// files written here, rank-file errors, cut points that keep the ids of the whole, and ids past
// 65535 through the token store. Tests that need the fetched files skip without them.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "datasets/byte_alphabet.h"
#include "datasets/hf_tokenizer_json.h"
#include "datasets/tiktoken_files.h"
#include "datasets/tiktoken_pretokenize.inl"
#include "datasets/token_store.h"
#include "datasets/tokenizer_registry.h"
#include "tests/datasets/test_files.h"
#include "trainer/cli/prepare_data_command.h"

namespace pipelane {
namespace {

using nlohmann::json;
using test_support::data_error_of;

TEST(Pretokenize, HandWrittenPatternsCutLikeNodesRegexEngine) {
  std::ifstream in("tests/datasets/pretokenize_fixture.json");
  ASSERT_TRUE(in) << "run from the repository root";
  const json fixture = json::parse(in);
  ASSERT_GT(fixture.size(), 50u);
  for (const json& entry : fixture) {
    const std::string text = entry["text"];
    std::vector<std::string> cl100k, qwen2, o200k;
    cl100k_pretokenize(text, 3, [&](std::string_view p) { cl100k.emplace_back(p); });
    cl100k_pretokenize(text, 1, [&](std::string_view p) { qwen2.emplace_back(p); });
    o200k_pretokenize(text, [&](std::string_view p) { o200k.emplace_back(p); });
    EXPECT_EQ(cl100k, entry["cl100k"].get<std::vector<std::string>>()) << printable(text);
    EXPECT_EQ(qwen2, entry["qwen2"].get<std::vector<std::string>>()) << printable(text);
    EXPECT_EQ(o200k, entry["o200k"].get<std::vector<std::string>>()) << printable(text);
  }
}

TEST(TokenizerRegistry, NamesAndRefusals) {
  const TokenizerRegistry registry = TokenizerRegistry::standard();
  EXPECT_EQ(registry.names(), "byte, gpt2, cl100k, o200k, llama3, hf:PATH/tokenizer.json or spm:PATH.model");
  for (const char* name : {"byte", "gpt2", "cl100k", "o200k", "llama3", "hf:x.json", "spm:x.model"})
    EXPECT_NO_THROW(registry.check_name(name)) << name;
  EXPECT_EQ(data_error_of([&] { registry.check_name("hf:"); }),
            "unknown tokenizer 'hf:' (expected byte, gpt2, cl100k, o200k, llama3, hf:PATH/tokenizer.json or "
            "spm:PATH.model)");
  EXPECT_NE(data_error_of([&] { registry.load("cl100k_base"); }).find("unknown tokenizer 'cl100k_base'"), std::string::npos);
  EXPECT_EQ(data_error_of([&] { registry.load("hf:/nonexistent/tokenizer.json"); }),
            "/nonexistent/tokenizer.json: no such tokenizer.json");
  EXPECT_EQ(data_error_of([&] { registry.load("spm:/nonexistent.model"); }), "/nonexistent.model: no such SentencePiece model");
  Tokenizer byte = registry.load("byte");
  EXPECT_EQ(byte.vocab_size(), 256u);
  EXPECT_EQ(byte.encode("hé"), (std::vector<std::uint32_t>{'h', 0xc3, 0xa9}));
  EXPECT_FALSE(byte.end_of_text());
}

// A byte-level tokenizer.json: 256 byte tokens in GPT-2's alphabet, then merges "h e", "he l",
// "hel l", "hell o", the token "é" (c3 a9), one special and one non-special added token.
json small_tokenizer_json() {
  const ByteAlphabet alphabet;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[alphabet.symbol_of(static_cast<unsigned char>(b))] = b;
  const std::string e_acute = alphabet.symbol_of(0xc3) + alphabet.symbol_of(0xa9);
  const std::vector<std::pair<std::string, std::string>> merges = {{"h", "e"}, {"he", "l"}, {"hel", "l"}, {"hell", "o"},
                                                                    {alphabet.symbol_of(0xc3), alphabet.symbol_of(0xa9)}};
  int id = 256;
  json merge_list = json::array();
  for (const auto& [left, right] : merges) {
    vocab[left + right] = id++;
    merge_list.push_back(left + " " + right);
  }
  json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}, {"ignore_merges", false}};
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array()}};
  j["pre_tokenizer"]["pretokenizers"].push_back(
      {{"type", "Split"}, {"behavior", "Isolated"}, {"invert", false},
       {"pattern", {{"Regex", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}}});
  j["pre_tokenizer"]["pretokenizers"].push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}});
  j["decoder"] = {{"type", "ByteLevel"}};
  j["added_tokens"] = json::array({json{{"id", 300}, {"content", "<|endoftext|>"}, {"special", true}},
                                   json{{"id", 301}, {"content", "<tool>"}, {"special", false}}});
  return j;
}

TEST(HfTokenizerJson, ReadsByteLevelBpeWithNfcAndAddedTokens) {
  test_support::TempDir dir;
  const std::string path = dir.file("tokenizer.json");
  test_support::write_file(path, small_tokenizer_json().dump());
  BpeTokenizer t = load_hf_tokenizer_json(path, "hf:" + path);
  EXPECT_EQ(t.vocab_size(), 302u);
  EXPECT_EQ(t.end_of_text(), 300u);
  // "hello" merges to 259 ("hello"); "e" + U+0301 is NFC "é" (260); <tool> is matched, the special
  // token's text is ordinary text; digits one at a time (Qwen2's pattern).
  EXPECT_EQ(t.encode("hello"), (std::vector<std::uint32_t>{259}));
  EXPECT_EQ(t.encode("e\xcc\x81"), (std::vector<std::uint32_t>{260}));
  EXPECT_EQ(t.encode("a<tool>b"), (std::vector<std::uint32_t>{'a', 301, 'b'}));
  EXPECT_EQ(t.encode("<tool><tool>a<tool>"), (std::vector<std::uint32_t>{301, 301, 'a', 301}));
  EXPECT_EQ(t.encode("<|endoftext|>").size(), 13u);
  EXPECT_EQ(t.encode("12"), (std::vector<std::uint32_t>{'1', '2'}));
  EXPECT_EQ(t.decode(t.encode("hello <tool> world")), "hello <tool> world");
  EXPECT_NE(data_error_of([&] { t.decode({299}); }).find("no token has id 299"), std::string::npos);
}

TEST(HfTokenizerJson, RefusesWhatItDoesNotSupportInOneLineNamingFileAndKey) {
  test_support::TempDir dir;
  const std::string path = dir.file("tokenizer.json");
  const auto refusal = [&](const std::function<void(json&)>& edit) {
    json j = small_tokenizer_json();
    edit(j);
    test_support::write_file(path, j.dump());
    const std::string error = data_error_of([&] { load_hf_tokenizer_json(path, "hf"); });
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
    EXPECT_EQ(error.rfind(path + ": ", 0), 0u) << error;
    return error;
  };
  EXPECT_NE(refusal([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+|\\s+"; })
                .find("pre_tokenizer.pretokenizers[0].pattern.Regex '\\w+|\\s+' is not a pattern pipelane matches"),
            std::string::npos);
  EXPECT_NE(refusal([](json& j) { j["model"]["type"] = "Unigram"; }).find("model.type is 'Unigram', expected BPE"),
            std::string::npos);
  EXPECT_NE(refusal([](json& j) { j["model"]["byte_fallback"] = true; }).find("model.byte_fallback"), std::string::npos);
  EXPECT_NE(refusal([](json& j) { j["normalizer"] = {{"type", "NFKC"}}; }).find("normalizer"), std::string::npos);
  EXPECT_NE(refusal([](json& j) { j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; })
                .find("pre_tokenizer.pretokenizers[1].add_prefix_space"),
            std::string::npos);
  EXPECT_NE(refusal([](json& j) { j["added_tokens"][1]["content"] = "a b"; }).find("added_tokens[1]"), std::string::npos);
  EXPECT_NE(refusal([](json& j) { j["model"]["merges"].push_back("x yz"); }).find("model.merges[5]"), std::string::npos);
  EXPECT_NE(refusal([](json& j) { j["model"]["vocab"]["a b"] = 400; }).find("not spelled in GPT-2's byte alphabet"),
            std::string::npos);
}

TEST(TiktokenFile, MalformedLinesNameFileAndLine) {
  test_support::TempDir dir;
  const std::string path = dir.file("bad.tiktoken");
  test_support::write_file(path, "IQ== 0\nIg== 2\n");
  EXPECT_EQ(data_error_of([&] { load_tiktoken_file(path, TiktokenFamily::kCl100k, "cl100k"); }),
            path + ":2: rank '2', expected 1 (ranks in order from 0)");
  test_support::write_file(path, "IQ== 0\n!!! 1\n");
  EXPECT_EQ(data_error_of([&] { load_tiktoken_file(path, TiktokenFamily::kCl100k, "cl100k"); }),
            path + ":2: expected 'BASE64 RANK', got '!!! 1'");
  test_support::write_file(path, "IQ== 0\n");
  EXPECT_NE(data_error_of([&] { load_tiktoken_file(path, TiktokenFamily::kCl100k, "cl100k"); }).find("no token for byte 0"),
            std::string::npos);
}

// Mixed text with many cut points: both sides of every cut give the ids of the whole.
const char* kCutText =
    "The quick brown fox, 1234 jumps.\nOver  the lazy dog's back; naïve café 漢字 😀 x2\t\n"
    "  indented line with 'quotes' and e\xcc\x81 combining, HTTPServer iPhone don't 9876543 end";

TEST(TokenizerCuts, EveryCutPointKeepsTheIdsOfTheWhole) {
  const std::string dir = default_tokenizer_dir();
  std::vector<std::string> names = {"byte"};
  for (const auto& [name, file] : {std::pair{"cl100k", "cl100k_base"}, {"o200k", "o200k_base"}, {"llama3", "llama3"}})
    if (std::filesystem::exists(dir + "/" + file + ".tiktoken")) names.push_back(name);
  if (std::filesystem::exists(dir + "/hf/qwen3/tokenizer.json")) names.push_back("hf:" + dir + "/hf/qwen3/tokenizer.json");
  if (std::filesystem::exists(dir + "/llama2/tokenizer.model")) names.push_back("spm:" + dir + "/llama2/tokenizer.model");
  const TokenizerRegistry registry = TokenizerRegistry::standard();
  const std::string text = kCutText;
  for (const std::string& name : names) {
    Tokenizer t = registry.load(name);
    const std::vector<std::uint32_t> whole = t.encode(text);
    const CutRule rule = t.cut_rule();
    const auto encoder = t.segment_encoders()();
    int cuts = 0;
    for (std::size_t p = 1; p < text.size(); ++p) {
      if (!rule.can_cut(text, p)) continue;
      ++cuts;
      std::vector<std::uint32_t> ids;
      encoder(std::string_view(text).substr(0, p), false, ids);
      encoder(std::string_view(text).substr(p), true, ids);
      EXPECT_EQ(ids, whole) << name << ": cut at byte " << p;
    }
    EXPECT_GT(cuts, 10) << name;
  }
  if (names.size() == 1) GTEST_SKIP() << "only byte checked: no tokenizer files in " << dir;
}

TEST(TokenizerStore, IdsPast65535RoundTripThroughTheTokenStore) {
  const std::string rank_file = default_tokenizer_dir() + "/o200k_base.tiktoken";
  if (!std::filesystem::exists(rank_file)) GTEST_SKIP() << rank_file << " missing (run scripts/fetch_tokenizers.sh)";
  test_support::TempDir dir;
  const std::string text = "Привет, мир! Это проверка токенизатора.\n\nこんにちは世界、トークナイザーのテストです。\n";
  test_support::write_file(dir.file("in.txt"), text);
  const std::string out = dir.file("o200k.h5");
  std::vector<std::string> args = {"prepare-data", "--input", dir.file("in.txt"), "--output", out,
                                   "--tokenizer", "o200k", "--valid-fraction", "0", "--documents", "whole-file"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  ASSERT_EQ(prepare_data_command(static_cast<int>(argv.size()), argv.data()), 0);
  const TokenStore store = TokenStore::open(out);
  EXPECT_EQ(store.meta().tokenizer, "o200k");
  EXPECT_EQ(store.meta().vocab_size, 200019u);
  Tokenizer t = TokenizerRegistry::standard().load("o200k");
  std::vector<std::uint32_t> expected = t.encode(text);
  expected.push_back(199999);  // <|endoftext|> ends the document
  EXPECT_EQ(store.train().tokens, expected);
  EXPECT_GT(*std::max_element(expected.begin(), expected.end() - 1), 65535u);
}

}  // namespace
}  // namespace pipelane
