// ByteTokenizer: the trivial tokenizer, one token per byte. It needs no training and no vocabulary
// file, which makes it the baseline every other tokenizer is compared against.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pipelane {

class ByteTokenizer {
 public:
  static constexpr std::uint32_t kVocabSize = 256;
  static constexpr const char* kName = "byte";

  std::vector<std::uint32_t> encode(std::string_view text) const;
  // DataError for an id >= kVocabSize: decoding it silently would hide a model/vocab mismatch.
  std::string decode(const std::vector<std::uint32_t>& ids) const;
};

}  // namespace pipelane
