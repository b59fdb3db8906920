#include "datasets/byte_bpe.h"

#include <limits>
#include <queue>

namespace pipelane {

void BpeMergeTable::build(const std::unordered_map<std::uint64_t, BpeMerge>& merges) {
  int bits = 1;
  while ((std::size_t{1} << bits) < 2 * merges.size()) ++bits;  // load factor <= 1/2
  slots_.assign(std::size_t{1} << bits, Slot{kEmptyKey, {}});
  shift_ = 64 - bits;
  size_ = merges.size();
  const std::size_t mask = slots_.size() - 1;
  for (const auto& [key, merge] : merges) {
    std::size_t i = home(key) & mask;
    while (slots_[i].key != kEmptyKey) i = (i + 1) & mask;
    slots_[i] = {key, merge};
  }
}

void merge_lowest_rank_first(const BpeMergeTable& merges, std::vector<std::uint32_t>& word) {
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
  if (word.size() < 2) return;
  const auto n = static_cast<std::uint32_t>(word.size());
  std::vector<std::uint32_t> next(n), previous(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? i + 1 : kNone;
    previous[i] = i > 0 ? i - 1 : kNone;
  }
  std::vector<Candidate> initial;
  initial.reserve(n);
  for (std::uint32_t i = 0; i + 1 < n; ++i)
    if (const BpeMerge* merge = merges.find(word[i], word[i + 1]))
      initial.push_back({merge->rank, i, word[i], word[i + 1], merge->merged});
  // Built from all initial pairs at once: O(n), where n pushes would be O(n log n).
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue(std::greater<>{},
                                                                               std::move(initial));
  const auto consider = [&](std::uint32_t left) {
    if (left == kNone || next[left] == kNone) return;
    if (const BpeMerge* merge = merges.find(word[left], word[next[left]]))
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

void merge_lowest_rank_first_by_rescanning(const BpeMergeTable& merges, std::vector<std::uint32_t>& word) {
  while (word.size() > 1) {
    std::uint32_t best_rank = std::numeric_limits<std::uint32_t>::max(), merged = 0;
    std::size_t best = word.size();
    for (std::size_t i = 0; i + 1 < word.size(); ++i) {
      const BpeMerge* merge = merges.find(word[i], word[i + 1]);
      if (merge && merge->rank < best_rank) {
        best_rank = merge->rank;
        merged = merge->merged;
        best = i;
      }
    }
    if (best == word.size()) break;
    word[best] = merged;
    word.erase(word.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
}

}  // namespace pipelane
