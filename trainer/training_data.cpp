#include "trainer/training_data.h"

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

std::size_t TrainingData::train_tokens() const {
  std::size_t n = 0;
  for (const WeightedSplit& s : train_splits()) n += s.split->tokens.size();
  return n;
}

std::string TrainingData::describe() const {
  char line[1024];
  std::string text;
  if (blend_.empty()) {
    std::snprintf(line, sizeof line, "data %s: %zu train / %zu validation tokens (%s tokenizer)",
                  main_path_.c_str(), main_.train().tokens.size(), main_.valid().tokens.size(),
                  main_.meta().tokenizer.c_str());
    return line;
  }
  double total = 0;
  for (const BlendedStore& b : blend_) total += b.weight;
  text = "data blend:";
  for (const BlendedStore& b : blend_) {
    std::snprintf(line, sizeof line, " %s %.0f%% (%zu tokens),", b.path.c_str(), 100.0 * b.weight / total,
                  b.store.train().tokens.size());
    text += line;
  }
  text.pop_back();
  std::snprintf(line, sizeof line, "; validation: %zu tokens (%s tokenizer)", main_.valid().tokens.size(),
                main_.meta().tokenizer.c_str());
  return text + line;
}

}  // namespace pipelane
