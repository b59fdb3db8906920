// Every tokenizer behind one interface, chosen by name:
//   byte                     one token per byte (vocab 256)
//   gpt2                     GPT-2's BPE (encoder.json + vocab.bpe, scripts/fetch_gpt2_tokenizer.sh)
//   cl100k, o200k, llama3    tiktoken rank files (scripts/fetch_tokenizers.sh)
//   hf:PATH/tokenizer.json   a Hugging Face byte-level BPE tokenizer.json (Llama 3, Qwen2, GPT-2)
//   spm:PATH.model           a SentencePiece model (Llama 2, Mistral)
// The name is what the token store records and what [data] tokenizer must repeat.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "datasets/bpe_tokenizer.h"
#include "datasets/byte_tokenizer.h"
#include "datasets/gpt2_tokenizer.h"
#include "datasets/spm_tokenizer.h"
#include "datasets/text_documents.h"
#include "datasets/tokenize_stream.h"

namespace pipelane {

class Tokenizer {
 public:
  using Impl = std::variant<ByteTokenizer, Gpt2Tokenizer, BpeTokenizer, SpmTokenizer>;
  Tokenizer(std::string name, Impl impl);

  const std::string& name() const { return name_; }
  std::uint32_t vocab_size() const;
  // The token that ends every document in prepare-data (<|endoftext|>, <|end_of_text|>, </s>);
  // none for bytes.
  std::optional<std::uint32_t> end_of_text() const;
  // Ids of valid UTF-8 `text` as one document (repair_utf8 first).
  std::vector<std::uint32_t> encode(std::string_view text);
  std::string decode(const std::vector<std::uint32_t>& ids) const;
  // One token's bytes, for streaming text out (a multi-byte character may span tokens).
  std::string token_bytes(std::uint32_t id) const;
  // Where prepare-data may cut a long document (see CutRule).
  CutRule cut_rule() const;
  // Makes an encoder per tokenize_stream worker, each with its own copy (and cache).
  std::function<ContinuingSegmentEncoder()> segment_encoders() const;

 private:
  std::string name_;
  Impl impl_;
};

// Where the files of the named tokenizers are.
struct TokenizerFiles {
  std::string gpt2_dir;        // encoder.json, vocab.bpe
  std::string tokenizers_dir;  // cl100k_base.tiktoken, o200k_base.tiktoken, llama3.tiktoken
  static TokenizerFiles defaults();  // default_gpt2_tokenizer_dir(), default_tokenizer_dir()
};

// Names to loaders; an object (no process-wide table), built by standard() or by hand.
class TokenizerRegistry {
 public:
  // `argument` is what follows a prefix name ("hf:" -> the path), "" for a plain name.
  using Loader = std::function<Tokenizer(const std::string& argument, const std::string& name)>;

  // `name` is a plain name ("cl100k") or a prefix ending in ':' ("hf:"); `shown` is how help and
  // errors spell it ("hf:PATH/tokenizer.json").
  void add(std::string name, std::string shown, Loader loader);
  // DataError naming the tokenizer: unknown name (listing the known ones), missing or bad files.
  Tokenizer load(const std::string& name) const;
  // DataError unless `name` is a known name or a prefix name with an argument (no file is read).
  void check_name(const std::string& name) const;
  // "byte, gpt2, cl100k, o200k, llama3, hf:PATH/tokenizer.json or spm:PATH.model"
  std::string names() const;

  // The tokenizers listed at the top of this file.
  static TokenizerRegistry standard(const TokenizerFiles& files = TokenizerFiles::defaults());

 private:
  struct Entry {
    std::string name, shown;
    Loader loader;
  };
  const Entry* find(const std::string& name, std::string& argument) const;
  std::vector<Entry> entries_;
};

// What prepare-data's --tokenizer help (and [data] tokenizer's) says: the names, their vocabularies,
// where the files come from.
std::string tokenizer_option_help();

}  // namespace pipelane
