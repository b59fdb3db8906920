#include "datasets/gpt2_tokenizer.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "datasets/byte_alphabet.h"
#include "datasets/byte_bpe.h"
#include "datasets/cache_dir.h"
#include "datasets/data_error.h"

namespace pipelane {

struct Gpt2Vocab {
  std::vector<std::string> token_bytes;      // id -> raw bytes
  std::uint32_t byte_id[256] = {};           // raw byte -> id of its one-byte token
  // (left id << 32 | right id) -> (rank, merged id): BPE on ids instead of strings.
  std::unordered_map<std::uint64_t, BpeMerge> merges;
  // Every merge's parts are made only by merges of lower rank (true of GPT-2's vocab.bpe, as of any
  // table learned by BPE). Then merging never creates a pair that ranks below the merge that made
  // it, and the priority-queue loop gives the ids of GPT-2's rescanning loop; otherwise the
  // rescanning loop runs.
  bool parts_made_before_use = false;
  BpeMergeTable lookup;  // the merges again, for BPE's inner loop
};

namespace {

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path + ": cannot open (run scripts/fetch_gpt2_tokenizer.sh to obtain it)");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// See Gpt2Vocab::parts_made_before_use.
bool parts_made_before_use(const Gpt2Vocab& vocab) {
  constexpr std::int64_t kNeverMade = -1;  // bytes, and tokens no merge makes
  std::vector<std::int64_t> last_made(vocab.token_bytes.size(), kNeverMade);
  for (const auto& [pair, merge] : vocab.merges)
    last_made[merge.merged] = std::max<std::int64_t>(last_made[merge.merged], merge.rank);
  for (const auto& [pair, merge] : vocab.merges) {
    const auto left = static_cast<std::uint32_t>(pair >> 32), right = static_cast<std::uint32_t>(pair);
    if (last_made[left] >= merge.rank || last_made[right] >= merge.rank) return false;
  }
  return true;
}

}  // namespace

Gpt2Tokenizer::Gpt2Tokenizer(std::shared_ptr<const Gpt2Vocab> vocab) : vocab_(std::move(vocab)) {}

Gpt2Tokenizer Gpt2Tokenizer::load(const std::string& encoder_json, const std::string& vocab_bpe) {
  auto vocab = std::make_shared<Gpt2Vocab>();
  const ByteAlphabet alphabet;

  nlohmann::json encoder;
  try {
    encoder = nlohmann::json::parse(read_whole_file(encoder_json));
  } catch (const nlohmann::json::exception& e) {
    throw DataError(encoder_json + ": not valid JSON, expected GPT-2's encoder.json (" + e.what() + ")");
  }
  if (!encoder.is_object() || encoder.empty())
    throw DataError(encoder_json + ": expected a JSON object mapping token strings to ids");
  std::unordered_map<std::string, std::uint32_t> id_of;  // stand-in symbol -> id
  vocab->token_bytes.resize(encoder.size());
  std::vector<bool> seen(encoder.size(), false);
  std::string raw;
  for (const auto& [symbol, value] : encoder.items()) {
    if (!value.is_number_unsigned() || value.get<std::uint64_t>() >= encoder.size())
      throw DataError(encoder_json + ": id of '" + printable(symbol) + "' must be an integer in [0, " +
                      std::to_string(encoder.size()) + ")");
    const auto id = value.get<std::uint32_t>();
    if (seen[id]) throw DataError(encoder_json + ": id " + std::to_string(id) + " is used twice");
    seen[id] = true;
    if (symbol == "<|endoftext|>") raw = symbol;  // the one special token: its bytes are its name
    else if (!alphabet.to_bytes(symbol, raw))
      throw DataError(encoder_json + ": token '" + printable(symbol) + "' is not in GPT-2's byte alphabet");
    vocab->token_bytes[id] = raw;
    id_of[symbol] = id;
  }
  for (int byte = 0; byte < 256; ++byte) {
    const auto it = id_of.find(alphabet.symbol_of(static_cast<unsigned char>(byte)));
    if (it == id_of.end())
      throw DataError(encoder_json + ": no token for byte " + std::to_string(byte) + " (expected all 256)");
    vocab->byte_id[byte] = it->second;
  }

  const std::string merges = read_whole_file(vocab_bpe);
  std::size_t pos = 0, line_number = 0;
  std::uint32_t rank = 0;
  while (pos < merges.size()) {
    std::size_t end = merges.find('\n', pos);
    if (end == std::string::npos) end = merges.size();
    std::string line = merges.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line_number == 1 && line.rfind("#version", 0) == 0) continue;
    if (line.empty()) continue;
    const std::size_t space = line.find(' ');
    if (space == std::string::npos || space == 0 || line.find(' ', space + 1) != std::string::npos)
      throw DataError(vocab_bpe + ":" + std::to_string(line_number) +
                      ": expected a merge 'LEFT RIGHT', got '" + printable(line) + "'");
    const std::string left = line.substr(0, space), right = line.substr(space + 1);
    const auto l = id_of.find(left), r = id_of.find(right), m = id_of.find(left + right);
    if (l == id_of.end() || r == id_of.end() || m == id_of.end())
      throw DataError(vocab_bpe + ":" + std::to_string(line_number) + ": merge '" + printable(line) +
                      "' uses a token missing from " + encoder_json + " (files from different releases?)");
    const std::uint64_t key = (std::uint64_t{l->second} << 32) | r->second;
    vocab->merges.emplace(key, BpeMerge{rank++, m->second});  // first occurrence wins
  }
  if (vocab->merges.empty()) throw DataError(vocab_bpe + ": no merges, expected GPT-2's vocab.bpe");
  vocab->parts_made_before_use = parts_made_before_use(*vocab);
  vocab->lookup.build(vocab->merges);

  Gpt2Tokenizer tokenizer(std::move(vocab));
  const auto eot = id_of.find("<|endoftext|>");
  tokenizer.end_of_text_ = eot != id_of.end() ? eot->second : tokenizer.vocab_size() - 1;
  return tokenizer;
}

Gpt2Tokenizer Gpt2Tokenizer::load_dir(const std::string& directory) {
  return load((std::filesystem::path(directory) / "encoder.json").string(),
              (std::filesystem::path(directory) / "vocab.bpe").string());
}

std::uint32_t Gpt2Tokenizer::vocab_size() const {
  return static_cast<std::uint32_t>(vocab_->token_bytes.size());
}

std::vector<std::uint32_t> Gpt2Tokenizer::encode(std::string_view text) {
  std::vector<std::uint32_t> ids;
  encode_append(text, ids);
  return ids;
}

void Gpt2Tokenizer::encode_append(std::string_view text, std::vector<std::uint32_t>& ids) {
  gpt2_pretokenize(text, [&](std::string_view piece) { encode_piece(piece, ids); });
}

void Gpt2Tokenizer::encode_piece(std::string_view piece, std::vector<std::uint32_t>& ids) {
  if (cache_.find(piece, ids)) return;
  std::vector<std::uint32_t>& word = word_;
  word.clear();
  for (char c : piece) word.push_back(vocab_->byte_id[static_cast<unsigned char>(c)]);
  // Both loops give the same ids (see Gpt2Vocab::parts_made_before_use); the rescan is quicker for
  // the short pieces of ordinary text, the queue keeps a long one O(n log n).
  constexpr std::size_t kQueueFromBytes = 32;
  if (vocab_->parts_made_before_use && word.size() >= kQueueFromBytes &&
      word.size() < std::numeric_limits<std::uint32_t>::max())
    merge_with_queue(word);
  else merge_by_rescanning(word);
  ids.insert(ids.end(), word.begin(), word.end());
  cache_.store(piece, word);
}

void Gpt2Tokenizer::merge_by_rescanning(std::vector<std::uint32_t>& word) const {
  while (word.size() > 1) {
    // The lowest-ranked adjacent pair is merged everywhere it occurs (left to right, no overlap).
    std::uint32_t best_rank = std::numeric_limits<std::uint32_t>::max(), left = 0, right = 0, merged = 0;
    for (std::size_t i = 0; i + 1 < word.size(); ++i) {
      const BpeMerge* merge = vocab_->lookup.find(word[i], word[i + 1]);
      if (merge && merge->rank < best_rank) {
        best_rank = merge->rank;
        left = word[i];
        right = word[i + 1];
        merged = merge->merged;
      }
    }
    if (best_rank == std::numeric_limits<std::uint32_t>::max()) break;
    std::size_t out = 0;
    for (std::size_t i = 0; i < word.size(); ++out) {
      if (i + 1 < word.size() && word[i] == left && word[i + 1] == right) {
        word[out] = merged;
        i += 2;
      } else {
        word[out] = word[i++];
      }
    }
    word.resize(out);
  }
}

void Gpt2Tokenizer::merge_with_queue(std::vector<std::uint32_t>& word) const {
  merge_lowest_rank_first(vocab_->lookup, word);
}

std::vector<std::uint32_t> Gpt2Tokenizer::encode_by_rescanning(std::string_view text) const {
  std::vector<std::uint32_t> ids, word;
  gpt2_pretokenize(text, [&](std::string_view piece) {
    word.clear();
    for (char c : piece) word.push_back(vocab_->byte_id[static_cast<unsigned char>(c)]);
    merge_by_rescanning(word);
    ids.insert(ids.end(), word.begin(), word.end());
  });
  return ids;
}

bool Gpt2Tokenizer::merges_by_queue() const { return vocab_->parts_made_before_use; }

std::string Gpt2Tokenizer::decode(const std::vector<std::uint32_t>& ids) const {
  std::string text;
  for (std::uint32_t id : ids) {
    if (id >= vocab_size())
      throw DataError("gpt2 tokenizer: token id " + std::to_string(id) +
                      " is outside the vocabulary (expected < " + std::to_string(vocab_size()) + ")");
    text += vocab_->token_bytes[id];
  }
  return text;
}

std::string default_gpt2_tokenizer_dir() { return pipelane_cache_dir("PIPELANE_GPT2_DIR", "gpt2"); }

bool gpt2_tokenizer_files_present(const std::string& directory) {
  std::error_code ec;
  const std::filesystem::path dir(directory);
  return std::filesystem::is_regular_file(dir / "encoder.json", ec) &&
         std::filesystem::is_regular_file(dir / "vocab.bpe", ec);
}

}  // namespace pipelane
