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
  void encode_append(std::string_view text, std::vector<std::uint32_t>& ids) const;

  // Where a document may be cut (see CutRule in text_documents.h): anywhere but inside a UTF-8
  // sequence, i.e. before a byte that is not a continuation byte (0x80-0xBF). Bytes have no
  // context, and a sequence (valid or not) never straddles such a cut, so repair is unchanged.
  static bool can_cut(std::string_view text, std::size_t p) {
    const auto byte = static_cast<unsigned char>(text[p]);
    return byte < 0x80 || byte >= 0xC0;
  }
  static constexpr const char* kCutDescription = "a byte that does not continue a UTF-8 sequence";
  // DataError for an id >= kVocabSize: decoding it silently would hide a model/vocab mismatch.
  std::string decode(const std::vector<std::uint32_t>& ids) const;
};

}  // namespace pipelane
