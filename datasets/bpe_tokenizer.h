// Byte-level BPE with a hand-written pre-tokenizer: the tokenizer behind tiktoken rank files
// (cl100k_base, o200k_base, Llama 3; tiktoken_files.h) and Hugging Face tokenizer.json files of
// byte-level BPE (Llama 3, Qwen2, GPT-2; hf_tokenizer_json.h). Encoding: optional NFC, the
// family's pre-tokenization pattern, then per piece either the piece itself when it is a token
// (tiktoken, and tokenizer.json's ignore_merges) or BPE merges lowest rank first.
// Special tokens (<|endoftext|>, <|begin_of_text|>, ...) written in the text are ordinary text, as
// in tiktoken's encode_ordinary: a document cannot forge a separator. Only document boundaries get
// end_of_text(). Added tokens that a tokenizer.json marks as not special are matched in the text,
// as Hugging Face does.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "datasets/byte_bpe.h"

namespace pipelane {

// The pre-tokenization patterns matched by hand (no regex engine at run time).
enum class PreTokenizer {
  kGpt2,    // GPT-2's (gpt2_tokenizer.h)
  kCl100k,  // cl100k_base's, also Llama 3's
  kQwen2,   // cl100k's with \p{N} one digit at a time
  kO200k,   // o200k_base's
};

// What a loader hands over; the tokenizer checks nothing it can trust the loader for.
struct BpeVocabulary {
  std::string name;                          // "cl100k", "hf:PATH", ...: messages and the token store
  std::vector<std::string> token_bytes;      // id -> raw bytes ("" for ids no token has)
  std::vector<std::uint8_t> defined;         // id -> 1 when some token has it
  std::uint32_t byte_id[256] = {};           // raw byte -> id of its one-byte token
  std::unordered_map<std::uint64_t, BpeMerge> merges;  // BpeMergeTable::key_of(left, right)
  bool whole_piece_first = false;            // a piece that is a token is that token
  PreTokenizer pattern = PreTokenizer::kCl100k;
  bool nfc = false;                          // normalize to NFC first (Qwen2's tokenizer.json)
  std::unordered_map<std::string, std::uint32_t> special;  // special token text -> id
  std::vector<std::pair<std::string, std::uint32_t>> added_in_text;  // non-special added tokens
  std::optional<std::uint32_t> end_of_text;  // ends every document in prepare-data
};

class BpeTokenizer {
 public:
  explicit BpeTokenizer(BpeVocabulary vocabulary);
  // Copies share the tables but not the piece cache, so each thread can own one cheaply.
  BpeTokenizer(const BpeTokenizer& other) : tables_(other.tables_) {}
  BpeTokenizer(BpeTokenizer&&) = default;

  const std::string& name() const;
  std::uint32_t vocab_size() const;  // highest id + 1, special tokens included
  std::optional<std::uint32_t> end_of_text() const;
  std::optional<std::uint32_t> special_token(const std::string& text) const;

  // Ids of valid UTF-8 `text` (see repair_utf8).
  std::vector<std::uint32_t> encode(std::string_view text);
  void encode_append(std::string_view text, std::vector<std::uint32_t>& ids);
  // Raw bytes (a prefix of a multi-byte character may be cut); special tokens as their text.
  // DataError naming the tokenizer for an id no token has.
  std::string decode(const std::vector<std::uint32_t>& ids) const;

  // Where a document may be cut so that both sides tokenize to the ids of the whole (CutRule in
  // text_documents.h): before a space or line break that follows an ASCII letter or digit. No piece
  // of these patterns holds a letter or digit followed by whitespace (letters and digits end their
  // runs, and only the optional one-character word prefix or the whitespace runs hold spaces), and
  // no alternative looks back, so the piece before ends there and matching after it starts afresh;
  // BPE works within pieces. NFC leaves both sides alone too: neither ' ' nor '\n' composes with
  // what follows or precedes it. Added tokens hold no whitespace (refused at load).
  static bool can_cut(std::string_view text, std::size_t p) {
    const auto before = static_cast<unsigned char>(text[p - 1]);
    const bool alnum = (before >= '0' && before <= '9') || ((before | 0x20) >= 'a' && (before | 0x20) <= 'z');
    return (text[p] == ' ' || text[p] == '\n') && alnum;
  }
  static constexpr const char* kCutDescription = "a space or line break after an ASCII letter or digit";

 private:
  struct Tables;
  void encode_normalized(std::string_view text, std::vector<std::uint32_t>& ids);
  void encode_piece(std::string_view piece, std::vector<std::uint32_t>& ids);

  std::shared_ptr<const Tables> tables_;
  BpePieceCache cache_;
  std::vector<std::uint32_t> word_;                                    // scratch for BPE
  std::string normalized_;                                             // scratch for NFC
};

}  // namespace pipelane
