#include "datasets/window_sampler.h"

#include <string>

#include "datasets/data_error.h"

namespace pipelane {
namespace {

void copy_window(const TokenSplit& split, std::uint64_t start, int seq_len, std::int32_t* inputs,
                 std::int32_t* targets) {
  const std::uint32_t* window = split.tokens.data() + start;
  for (int t = 0; t < seq_len; ++t) {
    inputs[t] = static_cast<std::int32_t>(window[t]);
    targets[t] = static_cast<std::int32_t>(window[t + 1]);
  }
}

void require_positive(int value, const char* name) {
  if (value < 1) throw DataError(std::string(name) + " must be >= 1, got " + std::to_string(value));
}

}  // namespace

WindowSampler::WindowSampler(const TokenSplit& split, int seq_len, std::uint64_t seed)
    : split_(&split), seq_len_(seq_len), start_count_(0), rng_state_(seed) {
  require_positive(seq_len, "seq_len");
  const std::uint64_t n = split.tokens.size();
  if (n < static_cast<std::uint64_t>(seq_len) + 1)
    throw DataError("token split has " + std::to_string(n) + " tokens, expected at least seq_len+1 = " +
                    std::to_string(seq_len + 1));
  start_count_ = n - static_cast<std::uint64_t>(seq_len);
}

// splitmix64: tiny, full-period over 2^64, and well mixed even from seeds like 0, 1, 2.
std::uint64_t WindowSampler::next_random() {
  std::uint64_t z = (rng_state_ += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

void WindowSampler::next_batch(int batch, std::int32_t* inputs, std::int32_t* targets) {
  require_positive(batch, "batch");
  for (int b = 0; b < batch; ++b) {
    // Lemire's multiply-shift: maps 64 random bits onto [0, start_count_) without a division.
    const auto wide = static_cast<unsigned __int128>(next_random()) * start_count_;
    const auto start = static_cast<std::uint64_t>(wide >> 64);
    const std::size_t row = static_cast<std::size_t>(b) * seq_len_;
    copy_window(*split_, start, seq_len_, inputs + row, targets + row);
  }
}

std::int64_t eval_window_count(const TokenSplit& split, int seq_len) {
  require_positive(seq_len, "seq_len");
  const std::uint64_t n = split.tokens.size();
  // Window w needs tokens [w*T, w*T+T], so the last token of the split is only ever a target.
  return n == 0 ? 0 : static_cast<std::int64_t>((n - 1) / static_cast<std::uint64_t>(seq_len));
}

void fill_eval_batch(const TokenSplit& split, int seq_len, int batch, int index,
                     std::int32_t* inputs, std::int32_t* targets) {
  require_positive(batch, "batch");
  if (index < 0) throw DataError("eval batch index must be >= 0, got " + std::to_string(index));
  const std::int64_t windows = eval_window_count(split, seq_len);
  if (windows == 0)
    throw DataError("token split has " + std::to_string(split.tokens.size()) +
                    " tokens, expected at least seq_len+1 = " + std::to_string(seq_len + 1) +
                    " for one evaluation window");
  for (int b = 0; b < batch; ++b) {
    const std::int64_t window = (static_cast<std::int64_t>(index) * batch + b) % windows;
    const std::size_t row = static_cast<std::size_t>(b) * seq_len;
    copy_window(split, static_cast<std::uint64_t>(window) * seq_len, seq_len, inputs + row,
                targets + row);
  }
}

}  // namespace pipelane
