#include "model/gpt_config.h"

#include <climits>
#include <cstdio>

namespace pipelane {
namespace {

// Overflow-checked a * b + c on 64-bit counts; nullopt on overflow.
std::optional<std::uint64_t> multiply_add(std::uint64_t a, std::uint64_t b, std::uint64_t c = 0) {
  std::uint64_t product = 0, sum = 0;
  if (__builtin_mul_overflow(a, b, &product) || __builtin_add_overflow(product, c, &sum)) return std::nullopt;
  return sum;
}

// Parameters of one transformer block for width C (LayerNorms, attention, MLP, biases).
std::optional<std::uint64_t> params_per_layer(std::uint64_t C) {
  // 2C + (3C^2 + 3C) + (C^2 + C) + 2C + (4C^2 + 4C) + (4C^2 + C) = 12 C^2 + 13 C
  const auto squares = multiply_add(C, C);
  if (!squares) return std::nullopt;
  return multiply_add(*squares, 12, 13 * C);
}

std::string human_bytes(long double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 8) {
    bytes /= 1024;
    ++unit;
  }
  char text[48];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0Lf %s" : "%.1Lf %s", bytes, units[unit]);
  return text;
}

}  // namespace

std::string GptConfig::problem() const {
  if (layers < 1) return "layers (" + std::to_string(layers) + ") must be >= 1";
  if (d_model < 1) return "d_model (" + std::to_string(d_model) + ") must be >= 1";
  if (heads < 1) return "heads (" + std::to_string(heads) + ") must be >= 1";
  if (d_model % heads != 0)
    return "heads (" + std::to_string(heads) + ") does not divide d_model (" +
           std::to_string(d_model) + ")";
  if (max_seq_len < 1) return "seq_len (" + std::to_string(max_seq_len) + ") must be >= 1";
  if (vocab_size < 2) return "vocab_size (" + std::to_string(vocab_size) + ") must be >= 2";
  // The MLP width 4 * d_model is an int in the model code.
  if (d_model > INT_MAX / 4)
    return "d_model (" + std::to_string(d_model) + ") must be <= " + std::to_string(INT_MAX / 4);
  // The padded vocabulary for tp up to heads (tp must divide heads) is an int too.
  const std::int64_t largest_padding = std::int64_t{kVocabPadding} * heads;
  if (vocab_size > INT_MAX - largest_padding)
    return "vocab_size (" + std::to_string(vocab_size) + ") must be <= " +
           std::to_string(INT_MAX - largest_padding) + " (padded to a multiple of 64 x tp, it must fit an int)";
  return {};
}

std::int64_t GptConfig::non_embedding_params() const {
  const std::int64_t C = d_model;
  const std::int64_t per_layer = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C +
                                 (4 * C * C + 4 * C) + (4 * C * C + C);
  return layers * per_layer + 2 * C;
}

std::optional<std::uint64_t> GptConfig::total_params() const {
  if (layers < 0 || d_model < 0 || max_seq_len < 0 || vocab_size < 0) return std::nullopt;
  const std::uint64_t C = static_cast<std::uint64_t>(d_model);
  const auto per_layer = params_per_layer(C);
  if (!per_layer) return std::nullopt;
  const auto blocks = multiply_add(*per_layer, static_cast<std::uint64_t>(layers), 2 * C);  // + final norm
  const std::uint64_t table_rows =
      static_cast<std::uint64_t>(padded_vocab_64()) + static_cast<std::uint64_t>(max_seq_len);
  if (!blocks) return std::nullopt;
  return multiply_add(table_rows, C, *blocks);
}

std::optional<GptConfig::SizeProblem> GptConfig::memory_problem(std::uint64_t bytes_per_rank, int ranks) const {
  constexpr std::uint64_t kBytesPerParam = 16;  // fp32 parameter, gradient, AdamW m and v
  const std::uint64_t share = static_cast<std::uint64_t>(ranks < 1 ? 1 : ranks);
  const std::optional<std::uint64_t> params = total_params();
  const std::optional<std::uint64_t> bytes = params ? multiply_add(*params, kBytesPerParam) : std::nullopt;
  if (bytes && *bytes / share <= bytes_per_rank) return std::nullopt;

  // Name what makes the model large: its width when one layer alone does not fit, else the layers
  // or the embedding tables, whichever holds more parameters.
  const std::optional<std::uint64_t> per_layer = params_per_layer(static_cast<std::uint64_t>(d_model));
  const long double layer_params = per_layer ? static_cast<long double>(*per_layer) : 12.0L * d_model * d_model;
  const long double all_layer_params = layer_params * layers;
  const long double table_params = (static_cast<long double>(padded_vocab_64()) + max_seq_len) * d_model;
  const long double budget = static_cast<long double>(bytes_per_rank) * static_cast<long double>(share);
  std::string key = "d_model";
  int value = d_model;
  if (layer_params * kBytesPerParam <= budget) {
    if (all_layer_params >= table_params) key = "layers", value = layers;
    else if (padded_vocab_64() >= max_seq_len) key = "vocab_size", value = vocab_size;
    else key = "seq_len", value = max_seq_len;
  }
  const long double needed = (all_layer_params + table_params + 2.0L * d_model) * kBytesPerParam;
  char count[64];
  std::snprintf(count, sizeof count, "%.3Lg", all_layer_params + table_params + 2.0L * d_model);
  std::string message = key + " = " + std::to_string(value) + " (layers " + std::to_string(layers) + ", d_model " +
                        std::to_string(d_model) + ", vocab_size " + std::to_string(vocab_size) + ") needs " +
                        human_bytes(needed) + " for parameters, gradients and AdamW moments (" + count +
                        " parameters x 16 bytes)";
  if (share > 1) message += ", " + human_bytes(needed / share) + " on each of " + std::to_string(share) + " ranks";
  return SizeProblem{key, message + ", more than " + human_bytes(static_cast<long double>(bytes_per_rank)) +
                              " per rank"};
}

double GptConfig::train_flops_per_token(int seq_len) const {
  return 6.0 * (static_cast<double>(non_embedding_params()) +
                static_cast<double>(d_model) * padded_vocab()) +
         12.0 * layers * d_model * static_cast<double>(seq_len);
}

}  // namespace pipelane
