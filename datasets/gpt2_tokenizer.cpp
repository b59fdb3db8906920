#include "datasets/gpt2_tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <queue>
#include <sstream>

#include "datasets/data_error.h"

namespace pipelane {

struct Gpt2Vocab {
  std::vector<std::string> token_bytes;      // id -> raw bytes
  std::uint32_t byte_id[256] = {};           // raw byte -> id of its one-byte token
  // (left id << 32 | right id) -> (rank, merged id): BPE on ids instead of strings.
  struct Merge {
    std::uint32_t rank, merged;
  };
  std::unordered_map<std::uint64_t, Merge> merges;
  // Every merge's parts are made only by merges of lower rank (true of GPT-2's vocab.bpe, as of any
  // table learned by BPE). Then merging never creates a pair that ranks below the merge that made
  // it, and the priority-queue loop gives the ids of GPT-2's rescanning loop; otherwise the
  // rescanning loop runs.
  bool parts_made_before_use = false;

  // The merges again, in an open-addressing table (one cache line per lookup instead of a bucket
  // and a node): lookups are BPE's inner loop.
  struct Slot {
    std::uint64_t key = kEmptyKey;
    Merge merge{};
  };
  static constexpr std::uint64_t kEmptyKey = ~std::uint64_t{0};  // ids are < 2^32 - 1
  std::vector<Slot> slots;
  int slot_shift = 64;

  static std::uint64_t key_of(std::uint32_t left, std::uint32_t right) { return (std::uint64_t{left} << 32) | right; }
  std::size_t home(std::uint64_t key) const {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> slot_shift);  // Fibonacci hashing
  }
  void build_lookup() {
    int bits = 1;
    while ((std::size_t{1} << bits) < 2 * merges.size()) ++bits;  // load factor <= 1/2
    slots.assign(std::size_t{1} << bits, Slot{});
    slot_shift = 64 - bits;
    const std::size_t mask = slots.size() - 1;
    for (const auto& [key, merge] : merges) {
      std::size_t i = home(key);
      while (slots[i].key != kEmptyKey) i = (i + 1) & mask;
      slots[i] = {key, merge};
    }
  }
  const Merge* find(std::uint32_t left, std::uint32_t right) const {
    const std::uint64_t key = key_of(left, right);
    const std::size_t mask = slots.size() - 1;
    for (std::size_t i = home(key);; i = (i + 1) & mask) {
      if (slots[i].key == key) return &slots[i].merge;
      if (slots[i].key == kEmptyKey) return nullptr;
    }
  }
};

namespace {

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path + ": cannot open (run scripts/fetch_gpt2_tokenizer.sh to obtain it)");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) out += static_cast<char>(c);
  else if (c < 0x800) {
    out += static_cast<char>(0xc0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else {
    out += static_cast<char>(0xe0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  }
}

// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the other 68 are shifted to
// U+0100.. so every token is printable text in encoder.json. Returns the inverse (UTF-8 of the
// stand-in character -> raw byte).
std::unordered_map<std::string, unsigned char> unicode_to_byte() {
  std::unordered_map<std::string, unsigned char> inverse;
  int shifted = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    std::string key;
    append_utf8(key, printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + shifted++));
    inverse[key] = static_cast<unsigned char>(b);
  }
  return inverse;
}

// Raw bytes of a token written in the stand-in alphabet; false if a character is not in it.
bool to_raw_bytes(const std::string& symbol, const std::unordered_map<std::string, unsigned char>& inverse,
                  std::string& raw) {
  raw.clear();
  std::size_t pos = 0, len = 0;
  if (find_invalid_utf8(symbol) != std::string::npos) return false;
  while (pos < symbol.size()) {
    decode_utf8_at(symbol, pos, len);
    const auto it = inverse.find(symbol.substr(pos, len));
    if (it == inverse.end()) return false;
    raw += static_cast<char>(it->second);
    pos += len;
  }
  return true;
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
  const auto inverse = unicode_to_byte();

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
    else if (!to_raw_bytes(symbol, inverse, raw))
      throw DataError(encoder_json + ": token '" + printable(symbol) + "' is not in GPT-2's byte alphabet");
    vocab->token_bytes[id] = raw;
    id_of[symbol] = id;
  }
  for (const auto& [symbol, byte] : inverse) {
    const auto it = id_of.find(symbol);
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
    vocab->merges.emplace(key, Gpt2Vocab::Merge{rank++, m->second});  // first occurrence wins
  }
  if (vocab->merges.empty()) throw DataError(vocab_bpe + ": no merges, expected GPT-2's vocab.bpe");
  vocab->parts_made_before_use = parts_made_before_use(*vocab);
  vocab->build_lookup();

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
  // Pieces repeat a lot (words), so a cache turns most BPE runs into one lookup. It is bounded in
  // entries and holds only short pieces, so a corpus of unique or huge strings cannot grow it.
  constexpr std::size_t kMaxCacheEntries = 1 << 20;
  constexpr std::size_t kMaxCachedPieceBytes = 256;
  const bool cacheable = piece.size() <= kMaxCachedPieceBytes;
  std::string key;
  if (cacheable) {
    key.assign(piece);
    if (const auto hit = cache_.find(key); hit != cache_.end()) {
      ids.insert(ids.end(), hit->second.begin(), hit->second.end());
      return;
    }
  }
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
  if (!cacheable) return;
  if (cache_.size() >= kMaxCacheEntries) cache_.clear();
  cache_.emplace(std::move(key), word);
}

void Gpt2Tokenizer::merge_by_rescanning(std::vector<std::uint32_t>& word) const {
  while (word.size() > 1) {
    // The lowest-ranked adjacent pair is merged everywhere it occurs (left to right, no overlap).
    std::uint32_t best_rank = std::numeric_limits<std::uint32_t>::max(), left = 0, right = 0, merged = 0;
    for (std::size_t i = 0; i + 1 < word.size(); ++i) {
      const Gpt2Vocab::Merge* merge = vocab_->find(word[i], word[i + 1]);
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
  // Symbols stay at their first index in a doubly linked list; a candidate is the pair starting at
  // `left`, ordered by (rank, left) so that equal ranks merge left to right as in the rescan. A
  // candidate is stale once either symbol has changed: a symbol only changes by merging into a
  // longer token, so comparing both ids is enough.
  struct Candidate {
    std::uint32_t rank;
    std::uint32_t left;
    std::uint32_t left_id, right_id, merged;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : left > other.left;
    }
  };
  constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();
  const auto n = static_cast<std::uint32_t>(word.size());
  std::vector<std::uint32_t> next(n), previous(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? i + 1 : kNone;
    previous[i] = i > 0 ? i - 1 : kNone;
  }
  std::vector<Candidate> initial;
  initial.reserve(n);
  for (std::uint32_t i = 0; i + 1 < n; ++i)
    if (const Gpt2Vocab::Merge* merge = vocab_->find(word[i], word[i + 1]))
      initial.push_back({merge->rank, i, word[i], word[i + 1], merge->merged});
  // Built from all initial pairs at once: O(n), where n pushes would be O(n log n).
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue(std::greater<>{},
                                                                               std::move(initial));
  const auto consider = [&](std::uint32_t left) {
    if (left == kNone || next[left] == kNone) return;
    if (const Gpt2Vocab::Merge* merge = vocab_->find(word[left], word[next[left]]))
      queue.push({merge->rank, left, word[left], word[next[left]], merge->merged});
  };
  std::vector<std::uint8_t> alive(n, 1);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    const std::uint32_t right = next[top.left];
    if (!alive[top.left] || right == kNone || word[top.left] != top.left_id || word[right] != top.right_id)
      continue;
    word[top.left] = top.merged;
    alive[right] = 0;
    next[top.left] = next[right];
    if (next[right] != kNone) previous[next[right]] = top.left;
    consider(previous[top.left]);
    consider(top.left);
  }
  std::size_t out = 0;
  for (std::uint32_t i = 0; i != kNone; i = next[i]) word[out++] = word[i];
  word.resize(out);
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

std::string default_gpt2_tokenizer_dir() {
  if (const char* dir = std::getenv("PIPELANE_GPT2_DIR"); dir && *dir) return dir;
  std::filesystem::path cache;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) cache = xdg;
  else if (const char* home = std::getenv("HOME"); home && *home) cache = std::filesystem::path(home) / ".cache";
  else cache = ".cache";
  return (cache / "pipelane" / "gpt2").string();
}

bool gpt2_tokenizer_files_present(const std::string& directory) {
  std::error_code ec;
  const std::filesystem::path dir(directory);
  return std::filesystem::is_regular_file(dir / "encoder.json", ec) &&
         std::filesystem::is_regular_file(dir / "vocab.bpe", ec);
}

}  // namespace pipelane
