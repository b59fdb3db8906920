// The training loop of one process holding the whole model: gradient accumulation over
// microbatches, warmup + cosine LR, global-norm clipping, AdamW, periodic validation, metrics.
// Memory is reserved up front in one training arena sized from the model's size tables.
#pragma once
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "datasets/token_store.h"
#include "model/gpt_model.h"
#include "runtime/device.h"
#include "trainer/run_directory.h"
#include "trainer/train_options.h"

namespace pipelane {

GptConfig gpt_config_from(const ModelOptions& m);

class SingleProcessTrainer {
 public:
  SingleProcessTrainer(const TrainOptions& opts, const TokenStore& data, Device& device,
                       double peak_gflops);
  ~SingleProcessTrainer();

  // Runs every step, writing metrics to `run` and progress to `console`; returns the summary.
  nlohmann::json run(RunDirectory& run, std::FILE* console);
  double evaluate();  // mean validation loss, nats/token
  std::size_t arena_bytes() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace pipelane
