// Text <-> token ids for the commands that read or write text (eval, generate, training samples):
// any tokenizer of datasets/tokenizer_registry.h (byte, gpt2, cl100k, o200k, llama3,
// hf:PATH/tokenizer.json, spm:PATH.model) behind one interface, chosen by name.
#pragma once
#include "trainer/hf/layer.h"  // trainer/README.md: the layers
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "datasets/tokenizer_registry.h"

namespace pipelane {

class TextTokenizer {
 public:
  // Files from TokenizerFiles::defaults(). std::runtime_error (a DataError) naming what is
  // unknown or missing otherwise.
  static TextTokenizer load(const std::string& name);

  const std::string& name() const { return tokenizer_->name(); }
  std::uint32_t vocab_size() const { return tokenizer_->vocab_size(); }
  // The token that ends documents (GPT-2's <|endoftext|>, Llama 3's <|end_of_text|>, ...); none for bytes.
  std::optional<std::int32_t> end_of_text() const;
  // Invalid UTF-8 is replaced (U+FFFD) first, except for bytes, as prepare-data does by default.
  std::vector<std::int32_t> encode(const std::string& text);
  // The bytes of one token (a multi-byte character may span tokens).
  std::string decode(std::int32_t id) const;

 private:
  std::shared_ptr<Tokenizer> tokenizer_;
};

}  // namespace pipelane
