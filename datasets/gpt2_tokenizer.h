// GPT-2's byte-level BPE, loaded from the original release files `encoder.json` (token string ->
// id, in GPT-2's printable byte alphabet) and `vocab.bpe` (merges, in priority order).
// Encoding: GPT-2's regex pre-tokenisation (contractions, letter runs, digit runs, other symbols,
// whitespace rules), then per piece the lowest-ranked merge is applied until none applies. Long
// pieces merge through a priority queue (as Hugging Face tokenizers do), O(n log n): one word of
// 1 MB takes about a second instead of a minute.
// `scripts/fetch_gpt2_tokenizer.sh` puts both files in `default_gpt2_tokenizer_dir()`.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "datasets/byte_bpe.h"
#include "datasets/utf8.h"

namespace pipelane {

struct Gpt2Vocab;  // immutable tables, shared by every copy of a tokenizer

class Gpt2Tokenizer {
 public:
  static constexpr const char* kName = "gpt2";
  static constexpr std::uint32_t kEndOfText = 50256;  // "<|endoftext|>" in the released vocabulary

  // DataError naming the file (and line of vocab.bpe) when a file is missing, malformed or the two
  // files disagree (a merge whose parts or result are not in the encoder).
  static Gpt2Tokenizer load(const std::string& encoder_json, const std::string& vocab_bpe);
  // Both files from one directory.
  static Gpt2Tokenizer load_dir(const std::string& directory);

  std::uint32_t vocab_size() const;
  std::uint32_t end_of_text() const { return end_of_text_; }

  // Ids of `text`, which must be valid UTF-8 (see repair_utf8); "<|endoftext|>" inside text is
  // ordinary text, as in the reference encoder: only documents boundaries get the special id.
  std::vector<std::uint32_t> encode(std::string_view text);
  void encode_append(std::string_view text, std::vector<std::uint32_t>& ids);
  // The same ids by GPT-2's own loop (rescan the word for its best pair after every merge,
  // O(n^2) per piece); the reference for tests.
  std::vector<std::uint32_t> encode_by_rescanning(std::string_view text) const;
  // False when the merge table is not ordered like one learned by BPE; then every piece is
  // merged by rescanning, which is what makes the ids right for any table.
  bool merges_by_queue() const;
  // Raw bytes (a prefix of a multi-byte character may be cut). DataError for an id out of range.
  std::string decode(const std::vector<std::uint32_t>& ids) const;

  // Where a document may be cut so that tokenizing the two sides gives the ids of the whole (see
  // CutRule in text_documents.h): before a space or line break that follows a printable ASCII
  // character. No piece of GPT-2's pattern holds a non-space followed by whitespace (a space only
  // ever starts a piece, " ?X+"), so a piece ends there; and the only rule that looks past a
  // piece's end, \s+(?!\S), applies to whitespace runs, none of which ends at the cut. So both
  // sides split into the pieces of the whole, and BPE works within pieces.
  static bool can_cut(std::string_view text, std::size_t p) {
    const auto before = static_cast<unsigned char>(text[p - 1]);
    return (text[p] == ' ' || text[p] == '\n') && before > ' ' && before < 0x7F;
  }
  static constexpr const char* kCutDescription = "a space or line break after a printable ASCII character";

  // Copies share the tables but not the piece cache, so each thread can own one cheaply.
  Gpt2Tokenizer(const Gpt2Tokenizer& other) : vocab_(other.vocab_), end_of_text_(other.end_of_text_) {}
  Gpt2Tokenizer(Gpt2Tokenizer&&) = default;

 private:
  explicit Gpt2Tokenizer(std::shared_ptr<const Gpt2Vocab> vocab);
  void encode_piece(std::string_view piece, std::vector<std::uint32_t>& ids);
  void merge_by_rescanning(std::vector<std::uint32_t>& word) const;
  void merge_with_queue(std::vector<std::uint32_t>& word) const;

  std::shared_ptr<const Gpt2Vocab> vocab_;
  std::uint32_t end_of_text_ = kEndOfText;
  BpePieceCache cache_;
  std::vector<std::uint32_t> word_;  // scratch for BPE
};

// Calls `emit(piece)` for each pre-token of valid UTF-8 `text`, in order; the pieces tile `text`.
// The rules of GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
template <typename Emit>
void gpt2_pretokenize(std::string_view text, Emit&& emit);

// ${PIPELANE_GPT2_DIR} if set, else ${XDG_CACHE_HOME:-$HOME/.cache}/pipelane/gpt2.
std::string default_gpt2_tokenizer_dir();
// True when encoder.json and vocab.bpe are both in `directory`.
bool gpt2_tokenizer_files_present(const std::string& directory);

}  // namespace pipelane

#include "datasets/gpt2_pretokenize.inl"
