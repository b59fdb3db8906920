// Text <-> token ids for the commands that read or write text (eval, generate, training samples):
// the byte tokenizer or GPT-2 BPE behind one interface, chosen by name.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "datasets/gpt2_tokenizer.h"

namespace pipelane {

class TextTokenizer {
 public:
  // "byte" or "gpt2" (files from default_gpt2_tokenizer_dir()). std::runtime_error naming what is
  // missing otherwise.
  static TextTokenizer load(const std::string& name);

  const std::string& name() const { return name_; }
  std::uint32_t vocab_size() const;
  // GPT-2's <|endoftext|>; none for bytes.
  std::optional<std::int32_t> end_of_text() const;
  // Invalid UTF-8 is replaced (U+FFFD) first for GPT-2, as prepare-data does by default.
  std::vector<std::int32_t> encode(const std::string& text);
  // The bytes of one token (a multi-byte character may span tokens).
  std::string decode(std::int32_t id) const;

 private:
  std::string name_;
  std::shared_ptr<Gpt2Tokenizer> gpt2_;  // null for bytes
};

}  // namespace pipelane
