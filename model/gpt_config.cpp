#include "model/gpt_config.h"

namespace pipelane {

std::string GptConfig::problem() const {
  if (layers < 1) return "layers (" + std::to_string(layers) + ") must be >= 1";
  if (d_model < 1) return "d_model (" + std::to_string(d_model) + ") must be >= 1";
  if (heads < 1) return "heads (" + std::to_string(heads) + ") must be >= 1";
  if (d_model % heads != 0)
    return "heads (" + std::to_string(heads) + ") does not divide d_model (" +
           std::to_string(d_model) + ")";
  if (max_seq_len < 1) return "seq_len (" + std::to_string(max_seq_len) + ") must be >= 1";
  if (vocab_size < 2) return "vocab_size (" + std::to_string(vocab_size) + ") must be >= 2";
  return {};
}

std::int64_t GptConfig::non_embedding_params() const {
  const std::int64_t C = d_model;
  const std::int64_t per_layer = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C +
                                 (4 * C * C + 4 * C) + (4 * C * C + C);
  return layers * per_layer + 2 * C;
}

double GptConfig::train_flops_per_token(int seq_len) const {
  return 6.0 * (static_cast<double>(non_embedding_params()) +
                static_cast<double>(d_model) * padded_vocab()) +
         12.0 * layers * d_model * static_cast<double>(seq_len);
}

}  // namespace pipelane
