// The shape of a GPT-2 model and which slice of it one pipeline stage holds.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace pipelane {

struct GptConfig {
  int layers = 4;
  int d_model = 128;
  int heads = 4;
  int max_seq_len = 128;  // rows of the learned position table
  int vocab_size = 256;   // real tokens; the tables are padded (padded_vocab)

  static constexpr int kVocabPadding = 64;
  // Rounded in 64 bits: vocab_size near INT_MAX must not overflow before problem() can say so.
  std::int64_t padded_vocab_64() const {
    return (std::int64_t{vocab_size} + kVocabPadding - 1) / kVocabPadding * kVocabPadding;
  }
  int padded_vocab() const { return static_cast<int>(padded_vocab_64()); }
  // The padded vocabulary under tensor parallelism of degree tp: padded_vocab() when tp divides
  // it (always for power-of-two tp <= 64, so the full wte has the same shape for any such tp and
  // checkpoints move between tp degrees unchanged), else the next multiple of 64 * tp.
  int padded_vocab_for_tp(int tp) const {
    const int vp = padded_vocab();
    if (tp <= 1 || vp % tp == 0) return vp;
    const std::int64_t m = std::int64_t{kVocabPadding} * tp;
    return static_cast<int>((vocab_size + m - 1) / m * m);
  }
  int head_size() const { return d_model / heads; }
  // Empty when valid, else what is wrong ("heads (5) does not divide d_model (128)"). Valid also
  // means every size the model code keeps in an int fits one (4 * d_model, the padded vocabulary
  // for any tp up to heads); whether the model fits in memory is memory_problem's question.
  std::string problem() const;
  // Parameters excluding the embedding tables (wte, wpe). Needs a valid config whose
  // total_params() is known.
  std::int64_t non_embedding_params() const;
  // Every parameter of the whole model (padded wte, wpe, the layers, the final norm) counted in
  // overflow-checked 64-bit arithmetic; nullopt when the count does not fit in 64 bits.
  std::optional<std::uint64_t> total_params() const;
  // Why the model cannot be trained in `bytes_per_rank` on each of `ranks` ranks that split it:
  // its parameters, gradients and AdamW moments (16 bytes per parameter, the least training
  // holds) do not fit. nullopt when they fit. Any non-negative sizes (it runs before problem()
  // so that an oversized vocabulary is reported by the memory it needs).
  struct SizeProblem {
    std::string key;      // the [model] key that makes it large: d_model, layers, vocab_size or seq_len
    std::string message;  // "layers = 1000000 (layers 1000000, d_model 128, vocab_size 256) needs
                          // 2.9 TiB for ..., more than 23.5 GiB per rank"
  };
  std::optional<SizeProblem> memory_problem(std::uint64_t bytes_per_rank, int ranks) const;
  // Training FLOPs per token: 6 * (non-embedding params + d_model * padded_vocab) for the matmuls
  // (the tied LM head runs, so it counts) + 12 * layers * d_model * T for attention.
  double train_flops_per_token(int seq_len) const;
};

// Layers [first_layer, last_layer) plus, optionally, the embedding (first stage) and the final
// norm + head + loss (last stage). The whole model is {0, layers, true, true}.
struct StageRange {
  int first_layer = 0;
  int last_layer = 0;
  bool has_embedding = true;
  bool has_head = true;
  static StageRange whole(const GptConfig& c) { return {0, c.layers, true, true}; }
  int num_layers() const { return last_layer - first_layer; }
};

}  // namespace pipelane
