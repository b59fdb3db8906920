#include "trainer/hf/text_generation.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace pipelane {

TokenSampler::TokenSampler(SamplingOptions options, std::uint64_t seed)
    : o_(options), state_(seed ^ 0x6A09E667F3BCC909ull) {}

double TokenSampler::uniform() {  // splitmix64, top 53 bits
  std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

std::int32_t TokenSampler::sample(const float* logits, int vocab) {
  std::int32_t best = 0;
  for (int v = 1; v < vocab; ++v)
    if (logits[v] > logits[best]) best = v;
  if (o_.temperature <= 0) return best;
  // Softmax in double, relative to the largest logit.
  probs_.resize(static_cast<std::size_t>(vocab));
  const double top = logits[best];
  for (int v = 0; v < vocab; ++v) probs_[v] = {std::exp((logits[v] - top) / o_.temperature), v};
  std::size_t keep = probs_.size();
  if ((o_.top_k > 0 && o_.top_k < vocab) || o_.top_p < 1.0) {
    // Most likely first; ties by id, so the order (and the draw) is the same everywhere.
    const auto by_prob = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
    if (o_.top_k > 0 && o_.top_k < vocab) {
      keep = static_cast<std::size_t>(o_.top_k);
      std::partial_sort(probs_.begin(), probs_.begin() + static_cast<std::ptrdiff_t>(keep), probs_.end(), by_prob);
    } else {
      std::sort(probs_.begin(), probs_.end(), by_prob);
    }
    if (o_.top_p < 1.0) {
      double total = 0;
      for (std::size_t i = 0; i < keep; ++i) total += probs_[i].first;
      double running = 0;
      for (std::size_t i = 0; i < keep; ++i) {
        running += probs_[i].first;
        if (running >= o_.top_p * total) {
          keep = i + 1;
          break;
        }
      }
    }
  }
  double total = 0;
  for (std::size_t i = 0; i < keep; ++i) total += probs_[i].first;
  const double target = uniform() * total;
  double running = 0;
  for (std::size_t i = 0; i < keep; ++i) {
    running += probs_[i].first;
    if (target < running) return probs_[i].second;
  }
  return probs_[keep - 1].second;
}

std::vector<std::int32_t> generate_tokens(GptDecoder& decoder, const std::vector<std::int32_t>& prompt, int count,
                                          TokenSampler& sampler, const std::function<void(std::int32_t)>& emit) {
  if (prompt.empty()) throw std::invalid_argument("generate_tokens: an empty prompt (start from <|endoftext|> or a newline)");
  const int context = decoder.context();
  std::vector<std::int32_t> window(prompt.end() - std::min<std::ptrdiff_t>(prompt.size(), context), prompt.end());
  decoder.reset();
  const float* logits = decoder.append(window.data(), static_cast<int>(window.size()));
  std::vector<std::int32_t> out;
  const int vocab = decoder.vocab_size();
  for (int i = 0; i < count; ++i) {
    const std::int32_t next = sampler.sample(logits, vocab);
    out.push_back(next);
    if (emit) emit(next);
    if (i + 1 == count) break;
    window.push_back(next);
    if (decoder.position() == context) {  // full: start again on the newest half
      window.erase(window.begin(), window.end() - std::max(1, context / 2));
      decoder.reset();
      logits = decoder.append(window.data(), static_cast<int>(window.size()));
    } else {
      logits = decoder.append(&next, 1);
    }
  }
  return out;
}

}  // namespace pipelane
