// Text samples during training, as llm.c prints them: every [train] sample_every steps rank 0
// gathers the model, continues [train] sample_prompt by sample_tokens tokens (temperature 1,
// top-k 200, seeded by the step so a rerun samples the same text), prints it and appends
// {"step", "prompt", "text", "tokens"} to <run dir>/samples.jsonl. Training's numbers do not move:
// the samples read the parameters only, and every rank waits at a barrier until rank 0 is done.
#pragma once
#include "trainer/run/layer.h"  // trainer/README.md: the layers
#include "runtime/backend.h"
#include <cstdint>
#include <optional>
#include <string>

#include "trainer/hf/model_source.h"
#include "trainer/hf/text_tokenizer.h"

namespace pipelane {

class TrainingSamples {
 public:
  // On rank 0: loads the tokenizer (std::runtime_error when it cannot).
  TrainingSamples(const std::string& tokenizer, const std::string& prompt, int tokens, std::uint64_t seed,
                  const std::string& run_dir);
  // The sample's text (prompt included; invalid UTF-8 replaced), also appended to samples.jsonl.
  // Decodes on `backend` (the rank's own; a sample is inference, on a stream of its own).
  std::string sample(int step, const LoadedModel& model, Backend& backend);
  std::string path() const { return path_; }

 private:
  TextTokenizer tokenizer_;
  std::string prompt_;
  int tokens_;
  std::uint64_t seed_;
  std::string path_;
};

}  // namespace pipelane
