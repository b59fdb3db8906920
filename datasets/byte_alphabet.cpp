#include "datasets/byte_alphabet.h"

#include "datasets/utf8.h"

namespace pipelane {

ByteAlphabet::ByteAlphabet() {
  int shifted = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    append_utf8(symbol_[b], printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + shifted++));
    byte_of_[symbol_[b]] = static_cast<unsigned char>(b);
  }
}

bool ByteAlphabet::to_bytes(std::string_view spelled, std::string& raw) const {
  raw.clear();
  std::size_t pos = 0, len = 0;
  if (find_invalid_utf8(spelled) != std::string::npos) return false;
  std::string character;
  while (pos < spelled.size()) {
    decode_utf8_at(spelled, pos, len);
    character.assign(spelled.substr(pos, len));
    const auto it = byte_of_.find(character);
    if (it == byte_of_.end()) return false;
    raw += static_cast<char>(it->second);
    pos += len;
  }
  return true;
}

}  // namespace pipelane
