// GPT-2's printable byte alphabet (bytes_to_unicode): the 188 printable bytes stand for themselves,
// the other 68 are shifted to U+0100.., so that every token of a byte-level BPE vocabulary is
// printable text. GPT-2's encoder.json and every byte-level Hugging Face tokenizer.json (Llama 3,
// Qwen2, GPT-2) spell their tokens and merges in it.
#pragma once
#include <string>
#include <string_view>
#include <unordered_map>

namespace pipelane {

class ByteAlphabet {
 public:
  ByteAlphabet();
  // The UTF-8 of the character that stands for `byte`.
  const std::string& symbol_of(unsigned char byte) const { return symbol_[byte]; }
  // Raw bytes of a token spelled in the alphabet; false if a character is not in it.
  bool to_bytes(std::string_view spelled, std::string& raw) const;

 private:
  std::string symbol_[256];
  std::unordered_map<std::string, unsigned char> byte_of_;
};

}  // namespace pipelane
