#include "trainer/text_tokenizer.h"

#include <stdexcept>

#include "datasets/byte_tokenizer.h"
#include "datasets/utf8.h"

namespace pipelane {

TextTokenizer TextTokenizer::load(const std::string& name) {
  TextTokenizer t;
  t.name_ = name;
  if (name == "byte") return t;
  if (name != "gpt2") throw std::runtime_error("unknown tokenizer '" + name + "' (byte or gpt2)");
  const std::string dir = default_gpt2_tokenizer_dir();
  if (!gpt2_tokenizer_files_present(dir))
    throw std::runtime_error("the GPT-2 tokenizer files are not in " + dir +
                             " (scripts/setup.sh fetches them; PIPELANE_GPT2_DIR points elsewhere)");
  t.gpt2_ = std::make_shared<Gpt2Tokenizer>(Gpt2Tokenizer::load_dir(dir));
  return t;
}

std::uint32_t TextTokenizer::vocab_size() const { return gpt2_ ? gpt2_->vocab_size() : ByteTokenizer::kVocabSize; }

std::optional<std::int32_t> TextTokenizer::end_of_text() const {
  if (!gpt2_) return std::nullopt;
  return static_cast<std::int32_t>(gpt2_->end_of_text());
}

std::vector<std::int32_t> TextTokenizer::encode(const std::string& text) {
  std::vector<std::uint32_t> ids;
  if (gpt2_) ids = gpt2_->encode(repair_utf8(text, InvalidUtf8::kReplace, "text"));
  else ids = ByteTokenizer().encode(text);
  return std::vector<std::int32_t>(ids.begin(), ids.end());
}

std::string TextTokenizer::decode(std::int32_t id) const {
  const std::vector<std::uint32_t> one = {static_cast<std::uint32_t>(id)};
  return gpt2_ ? gpt2_->decode(one) : ByteTokenizer().decode(one);
}

}  // namespace pipelane
