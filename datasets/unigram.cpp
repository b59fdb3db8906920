#include "datasets/unigram.h"

#include <cmath>
#include <string>
#include <vector>

#include "datasets/data_error.h"

namespace pipelane {
namespace {

void check_vocab(const std::vector<std::uint32_t>& tokens, std::uint32_t vocab_size, const char* which) {
  for (std::uint32_t t : tokens)
    if (t >= vocab_size)
      throw DataError(std::string("unigram baseline: ") + which + " token id " + std::to_string(t) +
                      " is >= vocab_size " + std::to_string(vocab_size));
}

}  // namespace

double unigram_cross_entropy(const TokenSplit& train, const TokenSplit& eval, std::uint32_t vocab_size) {
  if (vocab_size == 0) throw DataError("unigram baseline: vocab_size must be positive");
  if (eval.tokens.empty()) throw DataError("unigram baseline: the evaluation split has no tokens");
  check_vocab(train.tokens, vocab_size, "train");
  check_vocab(eval.tokens, vocab_size, "eval");

  std::vector<std::uint64_t> counts(vocab_size, 0);
  for (std::uint32_t t : train.tokens) ++counts[t];
  std::vector<std::uint64_t> eval_counts(vocab_size, 0);
  for (std::uint32_t t : eval.tokens) ++eval_counts[t];

  // Add-one smoothing: p(t) = (count(t) + 1) / (N + V), so unseen eval tokens cost log(N+V), not inf.
  const double log_denominator = std::log(static_cast<double>(train.tokens.size()) + vocab_size);
  double total_nats = 0.0;
  for (std::uint32_t t = 0; t < vocab_size; ++t)
    if (eval_counts[t] > 0)
      total_nats += static_cast<double>(eval_counts[t]) *
                    (log_denominator - std::log(static_cast<double>(counts[t]) + 1.0));
  return total_nats / static_cast<double>(eval.tokens.size());
}

}  // namespace pipelane
