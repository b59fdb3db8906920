// SentencePiece models (.model: Llama 2, Mistral, T5, ...) through the SentencePiece library
// (Debian's libsentencepiece-dev): encoding is the library's own, BPE or unigram, with the model's
// normalizer and byte fallback. No beginning-of-sentence token is added; prepare-data ends each
// document with the model's </s> (eos) instead.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "datasets/text_documents.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace pipelane {

class SpmTokenizer {
 public:
  // `name` is the tokenizer's name ("spm:PATH"). DataError naming the file when it is missing or
  // not a SentencePiece model.
  static SpmTokenizer load(const std::string& path, const std::string& name);

  const std::string& name() const { return name_; }
  std::uint32_t vocab_size() const;
  std::optional<std::uint32_t> end_of_text() const;

  // Ids of valid UTF-8 `text` as the start of a document (the model's dummy prefix is added when
  // it has one). `continues_document`: `text` continues a document that was cut before it at a
  // cut_rule() point (it starts with the space that was cut off), so it gets no dummy prefix.
  void encode_append(std::string_view text, bool continues_document, std::vector<std::uint32_t>& ids) const;
  std::vector<std::uint32_t> encode(std::string_view text) const;
  // The text of a whole sequence, as the library decodes it (the dummy prefix's space removed).
  std::string decode(const std::vector<std::uint32_t>& ids) const;
  // One token's bytes for streaming output: '▁' as a space, <0xNN> as the byte, control tokens as
  // nothing. DataError for an id outside the vocabulary.
  std::string token_bytes(std::uint32_t id) const;

  // Where a document may be cut: before a space that follows an ASCII letter or digit, when no piece
  // of the model holds a word boundary ('▁' after other characters: pieces then never span the
  // cut, BPE or unigram); otherwise nowhere (documents are held whole, up to --max-unsplit-mb).
  CutRule cut_rule() const;

 private:
  SpmTokenizer() = default;
  std::string name_;
  std::shared_ptr<const sentencepiece::SentencePieceProcessor> processor_;  // thread-safe, immutable
  bool dummy_prefix_ = true;      // the model puts '▁' before a document's text
  bool cut_between_words_ = true;  // see cut_rule()
};

}  // namespace pipelane
