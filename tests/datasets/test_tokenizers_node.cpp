// The independent check of every tokenizer kind: the npm packages' own JavaScript encoders, run
// with node once each over the same few MB of real text (tokenizer_corpus.h), must give exactly
// our ids, document by document; and decode(encode(x)) == x. Prints, per tokenizer, the bytes of
// each kind of text, the tokens compared, the mismatches and our encode speed (one thread).
// Skipped (with the reason) without node or the files of scripts/fetch_tokenizers.sh.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "datasets/text_documents.h"
#include "datasets/tiktoken_files.h"
#include "datasets/tokenizer_registry.h"
#include "tests/datasets/test_files.h"
#include "tests/datasets/tokenizer_corpus.h"

namespace pipelane {
namespace {

namespace fs = std::filesystem;

// The corpus, written once per test binary for the node side.
struct Shared {
  test_support::TempDir dir;
  test_support::TokenizerCorpus corpus = test_support::build_tokenizer_corpus();
  std::string documents_file = dir.file("documents.jsonl");
  Shared() {
    std::ofstream out(documents_file, std::ios::binary);
    for (const std::string& d : corpus.documents) out << nlohmann::json(d).dump() << '\n';
  }
};
Shared& shared() {
  static Shared s;
  return s;
}

std::string tokenizers_dir() { return default_tokenizer_dir(); }

bool node_available() { return std::system("node --version >/dev/null 2>&1") == 0; }

std::vector<std::vector<std::uint32_t>> run_node(const std::string& kind, const std::string& extra = "") {
  const std::string out = shared().dir.file(kind + "-ids.txt");
  const std::string command = "node tests/datasets/tokenizers_node_encode.js " + kind + " '" + tokenizers_dir() + "' '" +
                              shared().documents_file + "' '" + out + "'" + (extra.empty() ? "" : " '" + extra + "'");
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  std::vector<std::vector<std::uint32_t>> ids;
  std::ifstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    ids.emplace_back();
    for (std::uint32_t id; words >> id;) ids.back().push_back(id);
  }
  return ids;
}

// What decode(encode(x)) gives back: x, except that SentencePiece reads its meta symbol U+2581 in
// the text as the space it stands for (the library cannot tell them apart).
std::string round_trip_of(const std::string& text, bool sentencepiece) {
  if (!sentencepiece) return text;
  std::string out;
  for (std::size_t pos = 0; pos < text.size();) {
    if (text.compare(pos, 3, "\xE2\x96\x81") == 0) {
      out += ' ';
      pos += 3;
    } else {
      out += text[pos++];
    }
  }
  return out;
}

// Compares our ids with the reference's, document by document, and checks the round trip.
void expect_same_ids(Tokenizer tokenizer, const std::vector<std::vector<std::uint32_t>>& expected,
                     bool sentencepiece = false) {
  const auto& c = shared().corpus;
  ASSERT_EQ(expected.size(), c.documents.size()) << "the node encoder did not write every document";
  std::size_t tokens = 0, mismatched_documents = 0, round_trip_failures = 0, total_bytes = 0;
  double seconds = 0;
  for (std::size_t d = 0; d < c.documents.size(); ++d) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<std::uint32_t> ids = tokenizer.encode(c.documents[d]);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    total_bytes += c.documents[d].size();
    tokens += ids.size();
    if (ids != expected[d]) {
      std::size_t at = 0;
      while (at < std::min(ids.size(), expected[d].size()) && ids[at] == expected[d][at]) ++at;
      if (mismatched_documents++ < 3)
        ADD_FAILURE() << tokenizer.name() << ": document " << d << " (" << c.kinds[d] << ") differs at token " << at
                      << " of " << expected[d].size() << ": ours " << (at < ids.size() ? ids[at] : 0) << ", reference "
                      << (at < expected[d].size() ? expected[d][at] : 0) << " near '"
                      << printable(tokenizer.decode(std::vector<std::uint32_t>(
                             ids.begin() + static_cast<std::ptrdiff_t>(at > 3 ? at - 3 : 0),
                             ids.begin() + static_cast<std::ptrdiff_t>(std::min(ids.size(), at + 3)))))
                      << "'";
    }
    const std::string decoded = tokenizer.decode(ids), original = round_trip_of(c.documents[d], sentencepiece);
    if (decoded != original && round_trip_failures++ < 3) {
      std::size_t at = 0;
      while (at < std::min(decoded.size(), original.size()) && decoded[at] == original[at]) ++at;
      ADD_FAILURE() << tokenizer.name() << ": decode(encode(x)) != x for document " << d << " (" << c.kinds[d]
                    << ") from byte " << at << ": '" << printable(original.substr(at > 8 ? at - 8 : 0, 24))
                    << "' came back as '" << printable(decoded.substr(at > 8 ? at - 8 : 0, 24)) << "'";
    }
  }
  std::string kinds;
  for (const auto& [kind, bytes] : c.bytes) kinds += " " + kind + " " + std::to_string(bytes);
  std::printf("%s: %zu documents (bytes:%s), %zu tokens compared, %zu documents differ, %zu round trips fail; "
              "encode %.1f MB/s (one thread)\n",
              tokenizer.name().c_str(), c.documents.size(), kinds.c_str(), tokens, mismatched_documents,
              round_trip_failures, static_cast<double>(total_bytes) / 1e6 / std::max(seconds, 1e-9));
  EXPECT_GT(total_bytes, 2'500'000u) << "the corpus should be a few MB";
}

// Skips unless node and the file are there; returns the tokenizer.
#define REQUIRE_FILES(path)                                                                                   \
  if (!node_available()) GTEST_SKIP() << "node not found";                                                  \
  if (!fs::exists(path)) GTEST_SKIP() << path << " missing (run scripts/fetch_tokenizers.sh)";

TEST(TokenizersNode, Cl100kEqualsJsTiktoken) {
  REQUIRE_FILES(tokenizers_dir() + "/cl100k_base.tiktoken");
  expect_same_ids(TokenizerRegistry::standard().load("cl100k"), run_node("cl100k"));
}

TEST(TokenizersNode, O200kEqualsJsTiktoken) {
  REQUIRE_FILES(tokenizers_dir() + "/o200k_base.tiktoken");
  expect_same_ids(TokenizerRegistry::standard().load("o200k"), run_node("o200k"));
}

TEST(TokenizersNode, Llama3EqualsLlama3TokenizerJs) {
  REQUIRE_FILES(tokenizers_dir() + "/llama3.tiktoken");
  expect_same_ids(TokenizerRegistry::standard().load("llama3"), run_node("llama3"));
}

TEST(TokenizersNode, HfLlama3TokenizerJsonEqualsTokenizersJs) {
  const std::string json = tokenizers_dir() + "/hf/llama3/tokenizer.json";
  REQUIRE_FILES(json);
  expect_same_ids(TokenizerRegistry::standard().load("hf:" + json), run_node("hf", json));
}

TEST(TokenizersNode, HfQwen3TokenizerJsonEqualsTokenizersJs) {
  const std::string json = tokenizers_dir() + "/hf/qwen3/tokenizer.json";
  REQUIRE_FILES(json);
  expect_same_ids(TokenizerRegistry::standard().load("hf:" + json), run_node("hf", json));
}

// GPT-2's tokenizer.json as Hugging Face writes it (vocab = encoder.json, merges = vocab.bpe, the
// ByteLevel pre-tokenizer with its regex), made here from the GPT-2 files: it must give the ids of
// tokenizers.js and of our own GPT-2 tokenizer.
TEST(TokenizersNode, HfGpt2TokenizerJsonEqualsTokenizersJsAndGpt2) {
  const std::string dir = default_gpt2_tokenizer_dir();
  REQUIRE_FILES(dir + "/vocab.bpe");
  nlohmann::json j;
  j["model"] = {{"type", "BPE"}, {"vocab", nlohmann::json::parse(read_text_file(dir + "/encoder.json"))},
                {"merges", nlohmann::json::array()}};
  std::istringstream merges(read_text_file(dir + "/vocab.bpe"));
  for (std::string line; std::getline(merges, line);)
    if (!line.empty() && line.rfind("#version", 0) != 0) j["model"]["merges"].push_back(line);
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  j["post_processor"] = j["decoder"];
  j["added_tokens"] = nlohmann::json::array({{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}});
  const std::string json_path = shared().dir.file("gpt2-tokenizer.json");
  test_support::write_file(json_path, j.dump());
  const auto expected = run_node("hf", json_path);
  expect_same_ids(TokenizerRegistry::standard().load("hf:" + json_path), expected);
  expect_same_ids(TokenizerRegistry::standard().load("gpt2"), expected);
}

TEST(TokenizersNode, SpmLlama2EqualsLlamaTokenizerJs) {
  const std::string model = tokenizers_dir() + "/llama2/tokenizer.model";
  REQUIRE_FILES(model);
  expect_same_ids(TokenizerRegistry::standard().load("spm:" + model), run_node("llama2"), true);
}

}  // namespace
}  // namespace pipelane
