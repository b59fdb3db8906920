// `pipelane eval --model PATH --data FILE`: the loss and perplexity of a model (a checkpoint at any
// grid, or an exported Hugging Face directory) on a token file's split or on a text file tokenised
// on the fly, next to the unigram baseline, as a table or JSON.
#pragma once
#include "trainer/cli/layer.h"  // trainer/README.md: the layers
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace pipelane {

struct EvalRequest {
  std::string model;      // checkpoint or Hugging Face directory
  std::string data;       // .h5 / Megatron .bin/.idx / llm.c .bin token file, or text (.txt, .jsonl, .gz)
  std::string split = "valid";  // of a token file: valid | train
  std::string tokenizer;  // for text; "" = the model's
  int seq_len = 0;        // 0: the model's context
  int batch = 0;          // 0: as many sequences as fit in about 1 GiB of activations (at most 8)
  std::int64_t max_tokens = 0;  // 0: every window of the split
  int threads = 0;
};

struct EvalResult {
  std::string model, data, unigram_fit;
  std::int64_t tokens = 0, windows = 0;  // predicted tokens, windows of seq_len
  int seq_len = 0, batch = 0;
  double loss = 0, perplexity = 0, unigram_loss = 0, unigram_perplexity = 0, seconds = 0;
  nlohmann::json to_json() const;
};

// std::runtime_error (DataError, CheckpointError, ...) with one line on bad input.
EvalResult evaluate(const EvalRequest& request);

int eval_command(int argc, char** argv);

}  // namespace pipelane
