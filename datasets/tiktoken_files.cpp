#include "datasets/tiktoken_files.h"

#include <filesystem>

#include "datasets/cache_dir.h"
#include "datasets/data_error.h"
#include "datasets/text_documents.h"

namespace pipelane {
namespace {

// Standard base64 with padding, as tiktoken writes it; false on any other character or length.
bool decode_base64(std::string_view text, std::string& out) {
  out.clear();
  if (text.empty() || text.size() % 4 != 0) return false;
  std::uint32_t buffer = 0;
  int bits = 0;
  std::size_t padding = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    int value;
    if (c >= 'A' && c <= 'Z') value = c - 'A';
    else if (c >= 'a' && c <= 'z') value = c - 'a' + 26;
    else if (c >= '0' && c <= '9') value = c - '0' + 52;
    else if (c == '+') value = 62;
    else if (c == '/') value = 63;
    else if (c == '=' && i + 2 >= text.size()) { ++padding; continue; }
    else return false;
    if (padding) return false;  // data after '='
    buffer = (buffer << 6) | static_cast<std::uint32_t>(value);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((buffer >> bits) & 0xff);
    }
  }
  return padding <= 2;
}

// The special tokens each family adds after its mergeable ranks.
std::vector<std::pair<std::string, std::uint32_t>> special_tokens(TiktokenFamily family) {
  switch (family) {
    case TiktokenFamily::kCl100k:
      return {{"<|endoftext|>", 100257}, {"<|fim_prefix|>", 100258}, {"<|fim_middle|>", 100259},
              {"<|fim_suffix|>", 100260}, {"<|endofprompt|>", 100276}};
    case TiktokenFamily::kO200k:
      return {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}};
    case TiktokenFamily::kLlama3: {
      std::vector<std::pair<std::string, std::uint32_t>> tokens;
      const char* named[] = {"<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                             "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>",
                             "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
                             "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"};
      std::uint32_t id = 128000;
      for (const char* text : named) tokens.emplace_back(text, id++);
      for (int reserved = 3; id < 128256; ++reserved)
        tokens.emplace_back("<|reserved_special_token_" + std::to_string(reserved) + "|>", id++);
      return tokens;
    }
  }
  return {};
}

// tiktoken merges two adjacent parts when their bytes together are a token, the lowest rank first
// (the parts are always tokens: bytes at first, then tokens made by merging). As a pair table:
// every split of every token into two tokens, the pair making that token at its rank.
void add_tiktoken_merges(BpeVocabulary& v, std::uint32_t mergeable, const std::string& path) {
  std::unordered_map<std::string_view, std::uint32_t> id_of;
  id_of.reserve(mergeable);
  for (std::uint32_t id = 0; id < mergeable; ++id) id_of.emplace(v.token_bytes[id], id);
  for (int b = 0; b < 256; ++b) {
    const char byte = static_cast<char>(b);
    const auto it = id_of.find(std::string_view(&byte, 1));
    if (it == id_of.end()) throw DataError(path + ": no token for byte " + std::to_string(b) + " (expected all 256)");
    v.byte_id[b] = it->second;
  }
  for (std::uint32_t id = 0; id < mergeable; ++id) {
    const std::string_view token = v.token_bytes[id];
    for (std::size_t k = 1; k < token.size(); ++k) {
      const auto left = id_of.find(token.substr(0, k));
      if (left == id_of.end()) continue;
      const auto right = id_of.find(token.substr(k));
      if (right == id_of.end()) continue;
      v.merges.emplace(BpeMergeTable::key_of(left->second, right->second), BpeMerge{id, id});
    }
  }
}

const char* end_of_text_name(TiktokenFamily family) {
  return family == TiktokenFamily::kLlama3 ? "<|end_of_text|>" : "<|endoftext|>";
}

}  // namespace

std::string tiktoken_file_name(TiktokenFamily family) {
  switch (family) {
    case TiktokenFamily::kCl100k: return "cl100k_base.tiktoken";
    case TiktokenFamily::kO200k: return "o200k_base.tiktoken";
    case TiktokenFamily::kLlama3: return "llama3.tiktoken";
  }
  return "";
}

std::string default_tokenizer_dir() { return pipelane_cache_dir("PIPELANE_TOKENIZERS_DIR", "tokenizers"); }

BpeTokenizer load_tiktoken_file(const std::string& path, TiktokenFamily family, const std::string& name) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw DataError(path + ": no such rank file (scripts/fetch_tokenizers.sh fetches it; PIPELANE_TOKENIZERS_DIR "
                           "points elsewhere)");
  const std::string text = read_text_file(path);
  BpeVocabulary v;
  v.name = name;
  v.whole_piece_first = true;  // tiktoken looks a piece up before merging it
  v.pattern = family == TiktokenFamily::kO200k ? PreTokenizer::kO200k : PreTokenizer::kCl100k;
  std::size_t pos = 0, line_number = 0;
  std::string bytes;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (line.empty()) continue;
    const std::size_t space = line.find(' ');
    const std::string where = path + ":" + std::to_string(line_number);
    if (space == std::string_view::npos || !decode_base64(line.substr(0, space), bytes))
      throw DataError(where + ": expected 'BASE64 RANK', got '" + printable(line.substr(0, 60)) + "'");
    if (line.substr(space + 1) != std::to_string(v.token_bytes.size()))
      throw DataError(where + ": rank '" + printable(line.substr(space + 1)) + "', expected " +
                      std::to_string(v.token_bytes.size()) + " (ranks in order from 0)");
    v.token_bytes.push_back(bytes);
  }
  const auto mergeable = static_cast<std::uint32_t>(v.token_bytes.size());
  v.defined.assign(mergeable, 1);
  for (const auto& [special, id] : special_tokens(family)) {
    if (id < v.token_bytes.size())
      throw DataError(path + ": " + std::to_string(v.token_bytes.size()) + " ranks, but " + special + " is id " +
                      std::to_string(id) + " (a rank file of another family?)");
    v.token_bytes.resize(id + 1);
    v.defined.resize(id + 1, 0);
    v.token_bytes[id] = special;
    v.defined[id] = 1;
    v.special[special] = id;
  }
  v.end_of_text = v.special.at(end_of_text_name(family));
  add_tiktoken_merges(v, mergeable, path);
  return BpeTokenizer(std::move(v));
}

}  // namespace pipelane
