// The shape of a GPT-2 model and which slice of it one pipeline stage holds.
#pragma once
#include <cstdint>
#include <string>

namespace pipelane {

struct GptConfig {
  int layers = 4;
  int d_model = 128;
  int heads = 4;
  int max_seq_len = 128;  // rows of the learned position table
  int vocab_size = 256;   // real tokens; the tables are padded (padded_vocab)

  static constexpr int kVocabPadding = 64;
  int padded_vocab() const { return (vocab_size + kVocabPadding - 1) / kVocabPadding * kVocabPadding; }
  // The padded vocabulary under tensor parallelism of degree tp: padded_vocab() when tp divides
  // it (always for power-of-two tp <= 64, so the full wte has the same shape for any such tp and
  // checkpoints move between tp degrees unchanged), else the next multiple of 64 * tp.
  int padded_vocab_for_tp(int tp) const {
    const int vp = padded_vocab();
    if (tp <= 1 || vp % tp == 0) return vp;
    const int m = kVocabPadding * tp;
    return (vocab_size + m - 1) / m * m;
  }
  int head_size() const { return d_model / heads; }
  // Empty when valid, else what is wrong ("heads (5) does not divide d_model (128)").
  std::string problem() const;
  // Parameters excluding the embedding tables (wte, wpe).
  std::int64_t non_embedding_params() const;
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
