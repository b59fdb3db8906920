#include "trainer/run/training_data.h"

#include <cstdio>

namespace pipelane {

namespace {

void check_fits_model(const TrainOptions& o, const TokenStore& data, const std::string& where) {
  if (data.meta().tokenizer != o.data.tokenizer)
    throw ConfigError(where + ": tokenized with '" + data.meta().tokenizer + "' but [data] tokenizer = " +
                      o.data.tokenizer);
  if (data.meta().vocab_size > static_cast<std::uint32_t>(o.model.vocab_size))
    throw ConfigError(where + ": vocabulary of " + std::to_string(data.meta().vocab_size) +
                      " tokens does not fit [model] vocab_size = " + std::to_string(o.model.vocab_size));
}

void check_has_sample(const TokenSplit& split, int seq_len, const std::string& where, const std::string& what,
                      const std::string& hint) {
  const std::size_t need = static_cast<std::size_t>(seq_len) + 1;
  if (split.tokens.size() < need)
    throw ConfigError(where + ": the " + what + " split has " + std::to_string(split.tokens.size()) +
                      " tokens, fewer than [model] seq_len + 1 = " + std::to_string(need) + hint);
}

}  // namespace

TrainingData TrainingData::open(const TrainOptions& o) {
  TokenStore main = TokenStore::open(o.data.path);
  check_fits_model(o, main, o.data.path);
  std::vector<BlendedStore> blend;
  if (!o.data.blend.empty()) {
    std::vector<std::pair<std::string, double>> entries;
    try {
      entries = parse_blend(o.data.blend);
    } catch (const std::exception& e) {
      throw ConfigError(std::string("[data] blend: ") + e.what());
    }
    for (auto& [path, weight] : entries) {
      TokenStore store = TokenStore::open(path);
      check_fits_model(o, store, path);
      check_has_sample(store.train(), o.model.seq_len, path, "train", "");
      blend.push_back({path, weight, std::move(store)});
    }
  } else {
    check_has_sample(main.train(), o.model.seq_len, o.data.path, "train", "");
  }
  if (o.train.eval_every > 0)
    check_has_sample(main.valid(), o.model.seq_len, o.data.path, "validation",
                     " (set [train] eval_every = 0 to train without validation)");
  return TrainingData(o.data.path, std::move(main), std::move(blend));
}

std::vector<WeightedSplit> TrainingData::train_splits() const {
  if (blend_.empty()) return {{&main_.train(), 1.0}};
  std::vector<WeightedSplit> splits;
  for (const BlendedStore& b : blend_) splits.push_back({&b.store.train(), b.weight});
  return splits;
}

// Paths can be long, so the line is built from strings rather than into a fixed buffer.
std::string TrainingData::describe() const {
  const auto tokens = [](std::size_t n) { return std::to_string(n) + " tokens"; };
  const std::string tokenizer = " (" + main_.meta().tokenizer + " tokenizer)";
  if (blend_.empty())
    return "data " + main_path_ + ": " + std::to_string(main_.train().tokens.size()) + " train / " +
           std::to_string(main_.valid().tokens.size()) + " validation tokens" + tokenizer;
  double total = 0;
  for (const BlendedStore& b : blend_) total += b.weight;
  std::string text = "data blend:";
  for (const BlendedStore& b : blend_) {
    char share[16];
    std::snprintf(share, sizeof share, "%.0f%%", 100.0 * b.weight / total);
    text += (&b == &blend_.front() ? " " : ", ") + b.path + " " + share + " (" + tokens(b.store.train().tokens.size()) + ")";
  }
  return text + "; validation: " + tokens(main_.valid().tokens.size()) + tokenizer;
}

}  // namespace pipelane
