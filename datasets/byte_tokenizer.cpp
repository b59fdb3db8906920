#include "datasets/byte_tokenizer.h"

#include "datasets/data_error.h"

namespace pipelane {

std::vector<std::uint32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<std::uint32_t> ids;
  encode_append(text, ids);
  return ids;
}

void ByteTokenizer::encode_append(std::string_view text, std::vector<std::uint32_t>& ids) const {
  ids.reserve(ids.size() + text.size());
  // Through unsigned char: plain char is signed here, and bytes >= 0x80 must map to 128..255.
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
}

std::string ByteTokenizer::decode(const std::vector<std::uint32_t>& ids) const {
  std::string text;
  text.reserve(ids.size());
  for (std::uint32_t id : ids) {
    if (id >= kVocabSize)
      throw DataError("byte tokenizer: token id " + std::to_string(id) +
                      " is outside the vocabulary (expected < " + std::to_string(kVocabSize) + ")");
    text.push_back(static_cast<char>(id));
  }
  return text;
}

}  // namespace pipelane
