// The token data one training run reads: `[data] path` (the validation split, and the training
// split unless a blend is given) and the `[data] blend` files (training only: every run of a blend
// study is evaluated on the same held-out text). Everything is checked against the model before
// the first step, so a bad file stops the run with one line naming it.
#pragma once
#include "trainer/run/layer.h"  // trainer/README.md: the layers
#include <string>
#include <vector>

#include "datasets/sharded_sampler.h"
#include "datasets/token_store.h"
#include "trainer/config/train_options.h"

namespace pipelane {

struct BlendedStore {
  std::string path;
  double weight;
  TokenStore store;
};

class TrainingData {
 public:
  // ConfigError naming the file and the key to change (tokenizer or vocabulary mismatch, too
  // little text for seq_len); DataError from the files themselves (missing, corrupt).
  static TrainingData open(const TrainOptions& options);

  const TokenStore& main() const { return main_; }
  const std::vector<BlendedStore>& blend() const { return blend_; }
  // What the sampler draws training samples from: the blend's train splits with their weights, or
  // `main`'s train split alone.
  std::vector<WeightedSplit> train_splits() const;
  const TokenSplit& valid() const { return main_.valid(); }
  // One line for the console: the files, their token counts and weights.
  std::string describe() const;

 private:
  TrainingData(std::string main_path, TokenStore main, std::vector<BlendedStore> blend)
      : main_path_(std::move(main_path)), main_(std::move(main)), blend_(std::move(blend)) {}
  std::string main_path_;
  TokenStore main_;
  std::vector<BlendedStore> blend_;
};

}  // namespace pipelane
