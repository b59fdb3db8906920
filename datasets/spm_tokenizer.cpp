#include "datasets/spm_tokenizer.h"

#include <sentencepiece_processor.h>

#include <filesystem>

#include "datasets/data_error.h"

namespace pipelane {
namespace {

constexpr std::string_view kWordBoundary = "\xe2\x96\x81";  // U+2581, SentencePiece's escaped space

bool ascii_alnum(char c) {
  return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
}
bool cut_before_space(std::string_view text, std::size_t p) { return text[p] == ' ' && ascii_alnum(text[p - 1]); }
bool cut_nowhere(std::string_view, std::size_t) { return false; }

// A piece with '▁' after something else ("a▁", "a▁b") could span a cut before a space.
bool spans_word_boundary(const std::string& piece) {
  std::size_t start = 0;
  while (piece.compare(start, kWordBoundary.size(), kWordBoundary) == 0) start += kWordBoundary.size();
  return piece.find(kWordBoundary, start) != std::string::npos;
}

}  // namespace

SpmTokenizer SpmTokenizer::load(const std::string& path, const std::string& name) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw DataError(path + ": no such SentencePiece model");
  auto processor = std::make_shared<sentencepiece::SentencePieceProcessor>();
  const auto status = processor->Load(path);
  if (!status.ok())
    throw DataError(path + ": not a SentencePiece model (" + status.ToString() + ")");
  SpmTokenizer t;
  t.name_ = name;
  std::vector<std::string> pieces;
  if (!processor->Encode("a", &pieces).ok() || pieces.empty())
    throw DataError(path + ": the model cannot encode \"a\"");
  t.dummy_prefix_ = pieces.front().compare(0, kWordBoundary.size(), kWordBoundary) == 0;
  for (int id = 0; id < processor->GetPieceSize(); ++id)
    if (spans_word_boundary(processor->IdToPiece(id))) t.cut_between_words_ = false;
  t.processor_ = std::move(processor);
  return t;
}

std::uint32_t SpmTokenizer::vocab_size() const { return static_cast<std::uint32_t>(processor_->GetPieceSize()); }

std::optional<std::uint32_t> SpmTokenizer::end_of_text() const {
  const int eos = processor_->eos_id();
  if (eos < 0) return std::nullopt;
  return static_cast<std::uint32_t>(eos);
}

void SpmTokenizer::encode_append(std::string_view text, bool continues_document, std::vector<std::uint32_t>& ids) const {
  // A continuation starts with the space the cut left on its side; the dummy prefix stands for it.
  if (continues_document && dummy_prefix_ && !text.empty() && text.front() == ' ') text.remove_prefix(1);
  std::vector<int> out;
  const auto status = processor_->Encode(absl::string_view(text.data(), text.size()), &out);
  if (!status.ok()) throw DataError(name_ + ": SentencePiece could not encode the text (" + status.ToString() + ")");
  ids.insert(ids.end(), out.begin(), out.end());
}

std::vector<std::uint32_t> SpmTokenizer::encode(std::string_view text) const {
  std::vector<std::uint32_t> ids;
  encode_append(text, false, ids);
  return ids;
}

std::string SpmTokenizer::decode(const std::vector<std::uint32_t>& ids) const {
  std::vector<int> in;
  in.reserve(ids.size());
  for (std::uint32_t id : ids) {
    if (id >= vocab_size())
      throw DataError(name_ + " tokenizer: token id " + std::to_string(id) + " is outside the vocabulary (expected < " +
                      std::to_string(vocab_size()) + ")");
    in.push_back(static_cast<int>(id));
  }
  std::string text;
  const auto status = processor_->Decode(in, &text);
  if (!status.ok()) throw DataError(name_ + ": SentencePiece could not decode (" + status.ToString() + ")");
  return text;
}

std::string SpmTokenizer::token_bytes(std::uint32_t id) const {
  if (id >= vocab_size())
    throw DataError(name_ + " tokenizer: token id " + std::to_string(id) + " is outside the vocabulary (expected < " +
                    std::to_string(vocab_size()) + ")");
  const int i = static_cast<int>(id);
  if (processor_->IsControl(i)) return "";
  const std::string& piece = processor_->IdToPiece(i);
  if (processor_->IsByte(i)) return std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
  std::string text;
  for (std::size_t pos = 0; pos < piece.size();) {
    if (piece.compare(pos, kWordBoundary.size(), kWordBoundary) == 0) {
      text += ' ';
      pos += kWordBoundary.size();
    } else {
      text += piece[pos++];
    }
  }
  return text;
}

CutRule SpmTokenizer::cut_rule() const {
  if (cut_between_words_) return {&cut_before_space, "a space after an ASCII letter or digit"};
  return {&cut_nowhere, "nowhere: this SentencePiece model has pieces that span a word boundary"};
}

}  // namespace pipelane
