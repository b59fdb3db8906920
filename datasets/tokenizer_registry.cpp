#include "datasets/tokenizer_registry.h"

#include <filesystem>

#include "datasets/data_error.h"
#include "datasets/hf_tokenizer_json.h"
#include "datasets/tiktoken_files.h"
#include "datasets/utf8.h"

namespace pipelane {
namespace {

template <typename... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <typename... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

}  // namespace

Tokenizer::Tokenizer(std::string name, Impl impl) : name_(std::move(name)), impl_(std::move(impl)) {}

std::uint32_t Tokenizer::vocab_size() const {
  return std::visit(Overloaded{[](const ByteTokenizer&) { return ByteTokenizer::kVocabSize; },
                               [](const auto& t) { return t.vocab_size(); }},
                    impl_);
}

std::optional<std::uint32_t> Tokenizer::end_of_text() const {
  return std::visit(Overloaded{[](const ByteTokenizer&) -> std::optional<std::uint32_t> { return std::nullopt; },
                               [](const Gpt2Tokenizer& t) -> std::optional<std::uint32_t> { return t.end_of_text(); },
                               [](const auto& t) { return t.end_of_text(); }},
                    impl_);
}

std::vector<std::uint32_t> Tokenizer::encode(std::string_view text) {
  return std::visit([&](auto& t) { return t.encode(text); }, impl_);
}

std::string Tokenizer::decode(const std::vector<std::uint32_t>& ids) const {
  return std::visit([&](const auto& t) { return t.decode(ids); }, impl_);
}

std::string Tokenizer::token_bytes(std::uint32_t id) const {
  return std::visit(Overloaded{[&](const SpmTokenizer& t) { return t.token_bytes(id); },
                               [&](const auto& t) { return t.decode({id}); }},
                    impl_);
}

CutRule Tokenizer::cut_rule() const {
  return std::visit(Overloaded{[](const SpmTokenizer& t) { return t.cut_rule(); },
                               [](const auto& t) {
                                 using T = std::decay_t<decltype(t)>;
                                 return CutRule{&T::can_cut, T::kCutDescription};
                               }},
                    impl_);
}

std::function<ContinuingSegmentEncoder()> Tokenizer::segment_encoders() const {
  // Each call (one per worker, on that worker) copies the tokenizer: the tables are shared, the
  // piece cache is the worker's own.
  return [impl = impl_]() -> ContinuingSegmentEncoder {
    return std::visit(
        Overloaded{[](const SpmTokenizer& t) -> ContinuingSegmentEncoder {
                     return [t](std::string_view text, bool continues, std::vector<std::uint32_t>& ids) {
                       t.encode_append(text, continues, ids);
                     };
                   },
                   [](const auto& t) -> ContinuingSegmentEncoder {
                     using T = std::decay_t<decltype(t)>;
                     return [copy = std::make_shared<T>(t)](std::string_view text, bool, std::vector<std::uint32_t>& ids) {
                       copy->encode_append(text, ids);
                     };
                   }},
        impl);
  };
}

TokenizerFiles TokenizerFiles::defaults() { return {default_gpt2_tokenizer_dir(), default_tokenizer_dir()}; }

void TokenizerRegistry::add(std::string name, std::string shown, Loader loader) {
  entries_.push_back({std::move(name), std::move(shown), std::move(loader)});
}

const TokenizerRegistry::Entry* TokenizerRegistry::find(const std::string& name, std::string& argument) const {
  for (const Entry& e : entries_) {
    const bool prefix = !e.name.empty() && e.name.back() == ':';
    if (prefix ? name.rfind(e.name, 0) == 0 && name.size() > e.name.size() : name == e.name) {
      argument = prefix ? name.substr(e.name.size()) : "";
      return &e;
    }
  }
  return nullptr;
}

void TokenizerRegistry::check_name(const std::string& name) const {
  std::string argument;
  if (!find(name, argument)) throw DataError("unknown tokenizer '" + printable(name) + "' (expected " + names() + ")");
}

Tokenizer TokenizerRegistry::load(const std::string& name) const {
  std::string argument;
  const Entry* e = find(name, argument);
  if (!e) throw DataError("unknown tokenizer '" + printable(name) + "' (expected " + names() + ")");
  return e->loader(argument, name);
}

std::string TokenizerRegistry::names() const {
  std::string out;
  for (std::size_t i = 0; i < entries_.size(); ++i)
    out += (i == 0 ? "" : i + 1 == entries_.size() ? " or " : ", ") + entries_[i].shown;
  return out;
}

TokenizerRegistry TokenizerRegistry::standard(const TokenizerFiles& files) {
  TokenizerRegistry r;
  r.add(ByteTokenizer::kName, ByteTokenizer::kName,
        [](const std::string&, const std::string& name) { return Tokenizer(name, ByteTokenizer()); });
  r.add(Gpt2Tokenizer::kName, Gpt2Tokenizer::kName, [dir = files.gpt2_dir](const std::string&, const std::string& name) {
    if (!gpt2_tokenizer_files_present(dir))
      throw DataError(dir + ": no encoder.json and vocab.bpe (run scripts/fetch_gpt2_tokenizer.sh)");
    return Tokenizer(name, Gpt2Tokenizer::load_dir(dir));
  });
  const std::pair<const char*, TiktokenFamily> families[] = {
      {"cl100k", TiktokenFamily::kCl100k}, {"o200k", TiktokenFamily::kO200k}, {"llama3", TiktokenFamily::kLlama3}};
  for (const auto& [family_name, family] : families)
    r.add(family_name, family_name, [dir = files.tokenizers_dir, family = family](const std::string&, const std::string& name) {
      const std::string path = (std::filesystem::path(dir) / tiktoken_file_name(family)).string();
      return Tokenizer(name, load_tiktoken_file(path, family, name));
    });
  r.add("hf:", "hf:PATH/tokenizer.json", [](const std::string& path, const std::string& name) {
    return Tokenizer(name, load_hf_tokenizer_json(path, name));
  });
  r.add("spm:", "spm:PATH.model", [](const std::string& path, const std::string& name) {
    return Tokenizer(name, SpmTokenizer::load(path, name));
  });
  return r;
}

std::string tokenizer_option_help() {
  return "tokenizer: byte (one token per byte, vocab 256); gpt2 (GPT-2 BPE, vocab 50257; files from "
         "scripts/fetch_gpt2_tokenizer.sh); cl100k, o200k (OpenAI's tiktoken vocabularies, 100277 and 200019 "
         "ids) or llama3 (Llama 3's, 128256 ids), their rank files from scripts/fetch_tokenizers.sh (in "
         "$PIPELANE_TOKENIZERS_DIR, default ~/.cache/pipelane/tokenizers); hf:PATH/tokenizer.json (a Hugging "
         "Face byte-level BPE tokenizer.json: Llama 3, Qwen2, GPT-2); spm:PATH.model (a SentencePiece model: "
         "Llama 2, Mistral). The tokenizer's end-of-text token (<|endoftext|>, <|end_of_text|>, </s>) ends every "
         "document; special tokens written in the text are ordinary text. The name is stored with the tokens and "
         "[data] tokenizer must repeat it";
}

}  // namespace pipelane
