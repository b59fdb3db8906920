#include "trainer/hf/text_tokenizer.h"

#include "datasets/byte_tokenizer.h"
#include "datasets/utf8.h"

namespace pipelane {

TextTokenizer TextTokenizer::load(const std::string& name) {
  TextTokenizer t;
  t.tokenizer_ = std::make_shared<Tokenizer>(TokenizerRegistry::standard().load(name));
  return t;
}

std::optional<std::int32_t> TextTokenizer::end_of_text() const {
  const auto end = tokenizer_->end_of_text();
  if (!end) return std::nullopt;
  return static_cast<std::int32_t>(*end);
}

std::vector<std::int32_t> TextTokenizer::encode(const std::string& text) {
  const std::vector<std::uint32_t> ids = name() == ByteTokenizer::kName
                                             ? tokenizer_->encode(text)
                                             : tokenizer_->encode(repair_utf8(text, InvalidUtf8::kReplace, "text"));
  return std::vector<std::int32_t>(ids.begin(), ids.end());
}

std::string TextTokenizer::decode(std::int32_t id) const {
  return tokenizer_->token_bytes(static_cast<std::uint32_t>(id));
}

}  // namespace pipelane
