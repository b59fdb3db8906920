#include "datasets/hf_tokenizer_json.h"

#include <nlohmann/json.hpp>

#include <filesystem>

#include "datasets/byte_alphabet.h"
#include "datasets/data_error.h"
#include "datasets/text_documents.h"
#include "datasets/utf8.h"

namespace pipelane {
namespace {

using nlohmann::json;

// The Split regexes matched by hand, as tokenizer.json files spell them.
PreTokenizer pattern_of_regex(const std::string& regex, const std::string& where) {
  const std::string contractions = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
  const std::string cl100k_tail = "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  const std::string cl100k_head = contractions + "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|";
  const std::string word_prefix = "[^\\r\\n\\p{L}\\p{N}]?";
  const std::string upper = "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]", lower = "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]";
  if (regex == cl100k_head + "\\p{N}{1,3}" + cl100k_tail) return PreTokenizer::kCl100k;
  if (regex == cl100k_head + "\\p{N}" + cl100k_tail) return PreTokenizer::kQwen2;
  if (regex == word_prefix + upper + "*" + lower + "+" + contractions + "?|" + word_prefix + upper + "+" + lower +
                   "*" + contractions + "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
    return PreTokenizer::kO200k;
  if (regex == "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+")
    return PreTokenizer::kGpt2;
  throw DataError(where + " '" + printable(regex.substr(0, 120)) +
                  "' is not a pattern pipelane matches (GPT-2's, cl100k's and Llama 3's, Qwen2's, o200k's)");
}

std::string text_of(const json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

bool flag(const json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_boolean() && it->get<bool>();
}

// ByteLevel without a prefix space; with its GPT-2 regex or none.
void check_byte_level(const json& step, bool use_regex, const std::string& where) {
  if (text_of(step, "type") != "ByteLevel")
    throw DataError(where + ".type is '" + text_of(step, "type") + "', expected ByteLevel (byte-level BPE)");
  if (flag(step, "add_prefix_space"))
    throw DataError(where + ".add_prefix_space is true; pipelane supports false (as Llama 3, Qwen2 and GPT-2)");
  const bool regex = !step.contains("use_regex") || flag(step, "use_regex");
  if (regex != use_regex)
    throw DataError(where + ".use_regex is " + (regex ? "true" : "false") + ", expected " + (use_regex ? "true" : "false"));
}

PreTokenizer parse_pre_tokenizer(const json& root, const std::string& path) {
  const std::string where = path + ": pre_tokenizer";
  const json& p = root.value("pre_tokenizer", json());
  if (p.is_object() && text_of(p, "type") == "ByteLevel") {
    check_byte_level(p, true, where);
    return PreTokenizer::kGpt2;
  }
  if (!p.is_object() || text_of(p, "type") != "Sequence" || !p.contains("pretokenizers") ||
      !p["pretokenizers"].is_array() || p["pretokenizers"].size() != 2)
    throw DataError(where + ": expected ByteLevel, or a Sequence of a Split and a ByteLevel (got " +
                    printable(p.dump().substr(0, 120)) + ")");
  const json& split = p["pretokenizers"][0];
  const std::string split_where = where + ".pretokenizers[0]";
  if (text_of(split, "type") != "Split" || text_of(split, "behavior") != "Isolated" || flag(split, "invert"))
    throw DataError(split_where + ": expected a Split with behavior Isolated, not inverted");
  const json& pattern = split.value("pattern", json());
  if (!pattern.is_object() || !pattern.contains("Regex") || !pattern["Regex"].is_string())
    throw DataError(split_where + ".pattern: expected {\"Regex\": ...}");
  const PreTokenizer kind = pattern_of_regex(pattern["Regex"].get<std::string>(), split_where + ".pattern.Regex");
  check_byte_level(p["pretokenizers"][1], false, where + ".pretokenizers[1]");
  return kind;
}

bool parse_normalizer(const json& root, const std::string& path) {
  const json& n = root.value("normalizer", json());
  if (n.is_null()) return false;
  if (n.is_object() && text_of(n, "type") == "NFC") return true;
  throw DataError(path + ": normalizer " + printable(n.dump().substr(0, 120)) + " is not supported (expected null or NFC)");
}

void check_model(const json& model, const std::string& path) {
  if (text_of(model, "type") != "BPE")
    throw DataError(path + ": model.type is '" + text_of(model, "type") +
                    "', expected BPE (byte-level; SentencePiece models: spm:PATH.model)");
  if (flag(model, "byte_fallback"))
    throw DataError(path + ": model.byte_fallback is true: not byte-level BPE (a SentencePiece-style model; use "
                           "spm:PATH.model with its tokenizer.model)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!text_of(model, key).empty()) throw DataError(path + ": model." + key + " is set: not byte-level BPE");
  const json& dropout = model.value("dropout", json());
  if (!dropout.is_null() && !(dropout.is_number() && dropout.get<double>() == 0.0))
    throw DataError(path + ": model.dropout is set: BPE dropout makes encoding random (expected null)");
  if (!model.contains("vocab") || !model["vocab"].is_object() || !model.contains("merges") || !model["merges"].is_array())
    throw DataError(path + ": model.vocab (an object) and model.merges (an array) are required");
}

void add_token(BpeVocabulary& v, std::uint32_t id, const std::string& bytes) {
  if (id >= v.token_bytes.size()) {
    v.token_bytes.resize(id + 1);
    v.defined.resize(id + 1, 0);
  }
  v.token_bytes[id] = bytes;
  v.defined[id] = 1;
}

std::unordered_map<std::string, std::uint32_t> read_vocab(const json& vocab, BpeVocabulary& v, const std::string& path) {
  const ByteAlphabet alphabet;
  std::unordered_map<std::string, std::uint32_t> id_of;  // as spelled in the file
  std::string raw;
  for (const auto& [spelled, value] : vocab.items()) {
    if (!value.is_number_unsigned() || value.get<std::uint64_t>() >= (1u << 31))
      throw DataError(path + ": model.vocab['" + printable(spelled) + "'] must be an id, a non-negative integer");
    if (!alphabet.to_bytes(spelled, raw))
      throw DataError(path + ": model.vocab token '" + printable(spelled) +
                      "' is not spelled in GPT-2's byte alphabet: not a byte-level BPE vocabulary");
    const auto id = value.get<std::uint32_t>();
    if (id < v.defined.size() && v.defined[id]) throw DataError(path + ": model.vocab uses id " + std::to_string(id) + " twice");
    add_token(v, id, raw);
    id_of[spelled] = id;
  }
  for (int byte = 0; byte < 256; ++byte) {
    const auto it = id_of.find(alphabet.symbol_of(static_cast<unsigned char>(byte)));
    if (it == id_of.end()) throw DataError(path + ": model.vocab has no token for byte " + std::to_string(byte));
    v.byte_id[byte] = it->second;
  }
  return id_of;
}

void read_merges(const json& merges, const std::unordered_map<std::string, std::uint32_t>& id_of, BpeVocabulary& v,
                 const std::string& path) {
  std::uint32_t rank = 0;
  for (const json& merge : merges) {
    const std::string where = path + ": model.merges[" + std::to_string(rank) + "]";
    std::string left, right;
    if (merge.is_string()) {
      const std::string text = merge.get<std::string>();
      const std::size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos)
        throw DataError(where + ": expected \"LEFT RIGHT\", got '" + printable(text) + "'");
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      throw DataError(where + ": expected \"LEFT RIGHT\" or [LEFT, RIGHT]");
    }
    const auto l = id_of.find(left), r = id_of.find(right), m = id_of.find(left + right);
    if (l == id_of.end() || r == id_of.end() || m == id_of.end())
      throw DataError(where + ": '" + printable(left) + " " + printable(right) + "' uses a token missing from model.vocab");
    v.merges.emplace(BpeMergeTable::key_of(l->second, r->second), BpeMerge{rank++, m->second});  // first wins
  }
}

void read_added_tokens(const json& root, BpeVocabulary& v, const std::string& path) {
  const json& added = root.value("added_tokens", json::array());
  for (std::size_t i = 0; i < added.size(); ++i) {
    const json& token = added[i];
    const std::string where = path + ": added_tokens[" + std::to_string(i) + "]";
    if (!token.is_object() || !token.contains("id") || !token["id"].is_number_unsigned() || !token.contains("content") ||
        !token["content"].is_string() || find_invalid_utf8(token["content"].get<std::string>()) != std::string::npos)
      throw DataError(where + ": expected {\"id\": N, \"content\": TEXT, ...}");
    const auto id = token["id"].get<std::uint32_t>();
    const std::string content = token["content"].get<std::string>();
    add_token(v, id, content);
    if (flag(token, "special")) {
      v.special[content] = id;
      continue;
    }
    if (flag(token, "lstrip") || flag(token, "rstrip") || flag(token, "single_word") ||
        content.find_first_of(" \t\r\n") != std::string::npos || content.empty())
      throw DataError(where + " '" + printable(content) +
                      "': a non-special added token with whitespace, lstrip, rstrip or single_word is not supported");
    v.added_in_text.emplace_back(content, id);
  }
}

}  // namespace

BpeTokenizer load_hf_tokenizer_json(const std::string& path, const std::string& name) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw DataError(path + ": no such tokenizer.json");
  json root;
  try {
    root = json::parse(read_text_file(path));
  } catch (const json::exception& e) {
    throw DataError(path + ": not valid JSON, expected a Hugging Face tokenizer.json (" + e.what() + ")");
  }
  if (!root.is_object() || !root.contains("model") || !root["model"].is_object())
    throw DataError(path + ": model: expected an object (is this a Hugging Face tokenizer.json?)");
  const json& model = root["model"];
  check_model(model, path);
  BpeVocabulary v;
  v.name = name;
  v.nfc = parse_normalizer(root, path);
  v.pattern = parse_pre_tokenizer(root, path);
  const json& decoder = root.value("decoder", json());
  if (!decoder.is_null() && text_of(decoder, "type") != "ByteLevel")
    throw DataError(path + ": decoder.type is '" + text_of(decoder, "type") + "', expected ByteLevel");
  v.whole_piece_first = flag(model, "ignore_merges");
  const auto id_of = read_vocab(model["vocab"], v, path);
  read_merges(model["merges"], id_of, v, path);
  read_added_tokens(root, v, path);
  for (const char* end : {"<|end_of_text|>", "<|endoftext|>"})
    if (const auto it = v.special.find(end); it != v.special.end()) {
      v.end_of_text = it->second;
      break;
    }
  return BpeTokenizer(std::move(v));
}

}  // namespace pipelane
