// Training and evaluation windows over a token split. A window is seq_len+1 consecutive tokens:
// inputs = window[0..T), targets = window[1..T]. Windows may cross document boundaries, as in
// GPT-2/llm.c pretraining; the model learns the boundary from the text itself.
#pragma once
#include <cstdint>

#include "datasets/token_store.h"

namespace pipelane {

// Random training windows, uniformly over every start position. Deterministic from the seed on
// every platform: it uses its own generator, not <random>'s implementation-defined distributions.
// Holds a pointer to `split`, which must outlive the sampler.
class WindowSampler {
 public:
  // DataError if seq_len < 1 or the split has < seq_len+1 tokens.
  WindowSampler(const TokenSplit& split, int seq_len, std::uint64_t seed);
  // Fills batch*seq_len inputs and targets, row-major [batch][seq_len].
  void next_batch(int batch, std::int32_t* inputs, std::int32_t* targets);

 private:
  std::uint64_t next_random();

  const TokenSplit* split_;
  int seq_len_;
  std::uint64_t start_count_;  // number of valid window starts
  std::uint64_t rng_state_;
};

// Deterministic evaluation batches: consecutive non-overlapping windows (window w starts at token
// w*seq_len); batch `index` covers windows [index*batch, (index+1)*batch), wrapping around the
// split. DataError if the split holds no window or an argument is not positive.
void fill_eval_batch(const TokenSplit& split, int seq_len, int batch, int index,
                     std::int32_t* inputs, std::int32_t* targets);
// Number of distinct non-overlapping windows in the split (0 when it is too short).
std::int64_t eval_window_count(const TokenSplit& split, int seq_len);

}  // namespace pipelane
