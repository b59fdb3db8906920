// The merge step every byte-level BPE tokenizer here shares (GPT-2, tiktoken rank files, Hugging
// Face tokenizer.json): a table of the adjacent token pairs that may merge, and the loop that merges
// a word (a pre-token's bytes as token ids) lowest rank first.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace pipelane {

struct BpeMerge {
  std::uint32_t rank;    // lower merges first
  std::uint32_t merged;  // the token the pair becomes
};

// (left id, right id) -> BpeMerge in an open-addressing table: one cache line per lookup instead of
// a bucket and a node, and lookups are BPE's inner loop. Immutable once built.
class BpeMergeTable {
 public:
  static std::uint64_t key_of(std::uint32_t left, std::uint32_t right) { return (std::uint64_t{left} << 32) | right; }

  // From key_of(left, right) -> merge. Ids must be < 2^32 - 1.
  void build(const std::unordered_map<std::uint64_t, BpeMerge>& merges);
  const BpeMerge* find(std::uint32_t left, std::uint32_t right) const {
    const std::uint64_t key = key_of(left, right);
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = home(key) & mask;; i = (i + 1) & mask) {
      if (slots_[i].key == key) return &slots_[i].merge;
      if (slots_[i].key == kEmptyKey) return nullptr;
    }
  }
  std::size_t size() const { return size_; }

 private:
  struct Slot {
    std::uint64_t key;
    BpeMerge merge;
  };
  static constexpr std::uint64_t kEmptyKey = ~std::uint64_t{0};
  std::size_t home(std::uint64_t key) const {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);  // Fibonacci hashing
  }
  std::vector<Slot> slots_ = std::vector<Slot>(1, Slot{kEmptyKey, {}});
  int shift_ = 63;
  std::size_t size_ = 0;
};

// Merges `word` in place: repeatedly the adjacent pair of lowest rank, of equal ranks the leftmost,
// one pair at a time (the loop of tiktoken and of Hugging Face's BPE). Through a priority queue,
// O(n log n): one word of 1 MB takes about a second instead of a minute.
void merge_lowest_rank_first(const BpeMergeTable& merges, std::vector<std::uint32_t>& word);
// The same ids by rescanning the word after every merge, O(n^2): quicker for the short words of
// ordinary text, and the reference for tests.
void merge_lowest_rank_first_by_rescanning(const BpeMergeTable& merges, std::vector<std::uint32_t>& word);

// The ids of pieces seen before: pieces repeat a lot (words), so a cache turns most BPE runs into
// one lookup. It is bounded in entries and holds only short pieces, so a corpus of unique or huge
// strings cannot grow it. One per thread (tokenizer copies do not share it).
class BpePieceCache {
 public:
  // True, and the ids appended, when `piece` is cached.
  bool find(std::string_view piece, std::vector<std::uint32_t>& ids) {
    if (piece.size() > kMaxPieceBytes) return false;
    key_.assign(piece);
    const auto hit = map_.find(key_);
    if (hit == map_.end()) return false;
    ids.insert(ids.end(), hit->second.begin(), hit->second.end());
    return true;
  }
  void store(std::string_view piece, const std::vector<std::uint32_t>& ids) {
    if (piece.size() > kMaxPieceBytes) return;
    if (map_.size() >= kMaxEntries) map_.clear();
    map_.emplace(std::string(piece), ids);
  }

 private:
  static constexpr std::size_t kMaxEntries = 1 << 20;
  static constexpr std::size_t kMaxPieceBytes = 256;
  std::unordered_map<std::string, std::vector<std::uint32_t>> map_;
  std::string key_;
};

}  // namespace pipelane
