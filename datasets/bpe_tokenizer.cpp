#include "datasets/bpe_tokenizer.h"

#include <algorithm>
#include <limits>
#include <string_view>

#include "datasets/data_error.h"
#include "datasets/gpt2_tokenizer.h"
#include "datasets/nfc.h"
#include "datasets/tiktoken_pretokenize.inl"

namespace pipelane {

struct BpeTokenizer::Tables {
  BpeVocabulary vocabulary;
  BpeMergeTable merges;
  // Raw bytes -> id of every token, when a piece that is a token is that token.
  std::unordered_map<std::string_view, std::uint32_t> whole;
};

BpeTokenizer::BpeTokenizer(BpeVocabulary vocabulary) {
  auto tables = std::make_shared<Tables>();
  tables->vocabulary = std::move(vocabulary);
  const BpeVocabulary& v = tables->vocabulary;
  tables->merges.build(v.merges);
  if (v.whole_piece_first) {
    // Only the vocabulary BPE makes: special and added tokens are not looked up this way.
    std::vector<std::uint8_t> mergeable = v.defined;
    for (const auto& [text, id] : v.special) mergeable[id] = 0;
    for (const auto& [text, id] : v.added_in_text) mergeable[id] = 0;
    tables->whole.reserve(v.token_bytes.size());
    for (std::uint32_t id = 0; id < v.token_bytes.size(); ++id)
      if (mergeable[id]) tables->whole.emplace(v.token_bytes[id], id);
  }
  tables_ = std::move(tables);
}

const std::string& BpeTokenizer::name() const { return tables_->vocabulary.name; }

std::uint32_t BpeTokenizer::vocab_size() const {
  return static_cast<std::uint32_t>(tables_->vocabulary.token_bytes.size());
}

std::optional<std::uint32_t> BpeTokenizer::end_of_text() const { return tables_->vocabulary.end_of_text; }

std::optional<std::uint32_t> BpeTokenizer::special_token(const std::string& text) const {
  const auto it = tables_->vocabulary.special.find(text);
  if (it == tables_->vocabulary.special.end()) return std::nullopt;
  return it->second;
}

std::vector<std::uint32_t> BpeTokenizer::encode(std::string_view text) {
  std::vector<std::uint32_t> ids;
  encode_append(text, ids);
  return ids;
}

void BpeTokenizer::encode_append(std::string_view text, std::vector<std::uint32_t>& ids) {
  // Added tokens are found in the raw text first, leftmost then longest, as Hugging Face's
  // AddedVocabulary does; the text between them is normalized and pre-tokenized. Each token's next
  // occurrence is searched again only once the text before it is done: O(tokens x text).
  const auto& added = tables_->vocabulary.added_in_text;
  constexpr std::size_t kNone = std::string_view::npos;
  std::vector<std::size_t> next_at(added.size());
  for (std::size_t i = 0; i < added.size(); ++i) next_at[i] = text.find(added[i].first);
  std::size_t pos = 0;
  while (!added.empty() && pos < text.size()) {
    std::size_t best = kNone;
    for (std::size_t i = 0; i < added.size(); ++i) {
      if (next_at[i] != kNone && next_at[i] < pos) next_at[i] = text.find(added[i].first, pos);
      if (next_at[i] != kNone && (best == kNone || next_at[i] < next_at[best] ||
                                  (next_at[i] == next_at[best] && added[i].first.size() > added[best].first.size())))
        best = i;
    }
    if (best == kNone) break;
    encode_normalized(text.substr(pos, next_at[best] - pos), ids);
    ids.push_back(added[best].second);
    pos = next_at[best] + added[best].first.size();
  }
  encode_normalized(text.substr(pos), ids);
}

void BpeTokenizer::encode_normalized(std::string_view text, std::vector<std::uint32_t>& ids) {
  if (text.empty()) return;
  if (tables_->vocabulary.nfc) {
    normalized_.clear();
    append_nfc(text, normalized_);
    text = normalized_;
  }
  const auto piece = [&](std::string_view p) { encode_piece(p, ids); };
  switch (tables_->vocabulary.pattern) {
    case PreTokenizer::kGpt2: gpt2_pretokenize(text, piece); break;
    case PreTokenizer::kCl100k: cl100k_pretokenize(text, 3, piece); break;
    case PreTokenizer::kQwen2: cl100k_pretokenize(text, 1, piece); break;
    case PreTokenizer::kO200k: o200k_pretokenize(text, piece); break;
  }
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<std::uint32_t>& ids) {
  const Tables& t = *tables_;
  if (!t.whole.empty())
    if (const auto it = t.whole.find(piece); it != t.whole.end()) {
      ids.push_back(it->second);
      return;
    }
  if (cache_.find(piece, ids)) return;
  std::vector<std::uint32_t>& word = word_;
  word.clear();
  for (char c : piece) word.push_back(t.vocabulary.byte_id[static_cast<unsigned char>(c)]);
  // Both loops give the same ids; the rescan is quicker for the short pieces of ordinary text, the
  // queue keeps a long one O(n log n).
  constexpr std::size_t kQueueFromBytes = 32;
  if (word.size() >= kQueueFromBytes && word.size() < std::numeric_limits<std::uint32_t>::max())
    merge_lowest_rank_first(t.merges, word);
  else merge_lowest_rank_first_by_rescanning(t.merges, word);
  ids.insert(ids.end(), word.begin(), word.end());
  cache_.store(piece, word);
}

std::string BpeTokenizer::decode(const std::vector<std::uint32_t>& ids) const {
  const BpeVocabulary& v = tables_->vocabulary;
  std::string text;
  for (std::uint32_t id : ids) {
    if (id >= v.token_bytes.size() || !v.defined[id])
      throw DataError(v.name + " tokenizer: no token has id " + std::to_string(id) + " (the vocabulary has " +
                      std::to_string(v.token_bytes.size()) + " ids)");
    text += v.token_bytes[id];
  }
  return text;
}

}  // namespace pipelane
