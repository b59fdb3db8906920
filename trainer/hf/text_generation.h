// Sampling text from a model through the KV-cache decoder (model/gpt_decoder.h): temperature,
// top-k and top-p (nucleus) sampling from a seeded generator of our own, so a seed gives the same
// tokens on every platform. Used by `pipelane generate` and by the samples printed during training.
#pragma once
#include "trainer/hf/layer.h"  // trainer/README.md: the layers
#include <cstdint>
#include <functional>
#include <vector>

#include "model/gpt_decoder.h"

namespace pipelane {

struct SamplingOptions {
  double temperature = 0.8;  // 0: always the most likely token
  int top_k = 200;           // 0: no cut
  double top_p = 1.0;        // keep the most likely tokens whose probabilities sum to top_p; 1: all
};

class TokenSampler {
 public:
  TokenSampler(SamplingOptions options, std::uint64_t seed);
  // A token id in [0, vocab) drawn from `logits` (the real vocabulary's columns).
  std::int32_t sample(const float* logits, int vocab);

 private:
  double uniform();  // [0, 1)
  SamplingOptions o_;
  std::uint64_t state_;
  std::vector<std::pair<double, std::int32_t>> probs_;  // scratch
};

// Appends `prompt` (non-empty) to the decoder, then samples `count` tokens, calling `emit` with
// each as soon as it is drawn. When the context is full, the decoder restarts on the newest half
// of the tokens (a sliding window), so any `count` works. Returns the sampled ids.
std::vector<std::int32_t> generate_tokens(GptDecoder& decoder, const std::vector<std::int32_t>& prompt, int count,
                                          TokenSampler& sampler, const std::function<void(std::int32_t)>& emit);

}  // namespace pipelane
