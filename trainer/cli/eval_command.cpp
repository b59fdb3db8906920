#include "trainer/cli/eval_command.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <filesystem>
#include <iostream>
#include <optional>
#include <stdexcept>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "trainer/cli/command_options.h"

#include "datasets/text_documents.h"
#include "datasets/token_store.h"
#include "datasets/unigram.h"
#include "model/gpt_model.h"
#include "runtime/arena.h"
#include "runtime/backend_registry.h"
#include "trainer/hf/model_source.h"
#include "trainer/hf/text_tokenizer.h"

namespace pipelane {

namespace fs = std::filesystem;
namespace po = boost::program_options;

namespace {

bool is_token_file(const std::string& path) {
  const std::string ext = fs::path(path).extension().string();
  return ext == ".h5" || ext == ".hdf5" || ext == ".bin" || ext == ".idx";
}

// The text's tokens (documents joined; GPT-2's <|endoftext|> between them, as prepare-data does).
TokenSplit tokenize_text(const std::string& path, TextTokenizer& tok) {
  std::vector<std::string> docs;
  if (is_jsonl_path(path)) {  // one document per record's "text"
    std::istringstream lines(read_text_file(path));
    int number = 0;
    for (std::string line; std::getline(lines, line);) {
      ++number;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
      if (!record.is_object() || !record.contains("text") || !record["text"].is_string())
        throw std::runtime_error(path + ":" + std::to_string(number) + ": expected a JSON object with a string \"text\"");
      docs.push_back(record["text"].get<std::string>());
    }
  } else {
    docs.push_back(read_text_file(path));
  }
  TokenSplit split;
  split.doc_offsets.push_back(0);
  for (const std::string& d : docs) {
    for (std::int32_t id : tok.encode(d)) split.tokens.push_back(static_cast<std::uint32_t>(id));
    if (const auto eot = tok.end_of_text(); eot && docs.size() > 1)
      split.tokens.push_back(static_cast<std::uint32_t>(*eot));
    split.doc_offsets.push_back(split.tokens.size());
  }
  return split;
}

}  // namespace

nlohmann::json EvalResult::to_json() const {
  return {{"model", model}, {"data", data}, {"tokens", tokens}, {"windows", windows}, {"seq_len", seq_len},
          {"batch", batch}, {"loss", loss}, {"perplexity", perplexity}, {"unigram_loss", unigram_loss},
          {"unigram_perplexity", unigram_perplexity}, {"unigram_fit", unigram_fit}, {"seconds", seconds}};
}

namespace {

// The tokens a model is evaluated on and those the unigram baseline is fitted on: a token file's
// split and its train split, or a text file's tokens for both. Says what they are in `r`.
class EvalTokens {
 public:
  EvalTokens(const EvalRequest& req, const LoadedModel& m, EvalResult& r) {
    if (!fs::exists(req.data)) throw std::runtime_error(req.data + ": no such file");
    if (is_token_file(req.data)) open_token_file(req, m, r);
    else tokenize_text_file(req, m, r);
    if (static_cast<int>(vocab_) > m.config.vocab_size)
      throw std::runtime_error(req.data + ": vocabulary of " + std::to_string(vocab_) + " tokens, the model has " +
                               std::to_string(m.config.vocab_size));
  }
  EvalTokens(const EvalTokens&) = delete;  // eval_ and fit_ point into it
  EvalTokens& operator=(const EvalTokens&) = delete;

  const TokenSplit& evaluated() const { return *eval_; }
  const TokenSplit& unigram_fit() const { return *fit_; }
  std::uint32_t vocab() const { return vocab_; }

 private:
  void open_token_file(const EvalRequest& req, const LoadedModel& m, EvalResult& r) {
    store_.emplace(TokenStore::open(req.data));
    vocab_ = store_->meta().vocab_size;
    eval_ = req.split == "valid" ? &store_->valid() : &store_->train();
    fit_ = &store_->train();
    r.data = req.data + " (" + req.split + " split, " + store_->meta().tokenizer + " tokens)";
    r.unigram_fit = "the file's train split";
    if (!req.tokenizer.empty() && req.tokenizer != store_->meta().tokenizer)
      throw std::runtime_error(req.data + " holds " + store_->meta().tokenizer + " tokens, not --tokenizer " +
                               req.tokenizer);
    if (!m.tokenizer.empty() && m.tokenizer != store_->meta().tokenizer)
      throw std::runtime_error(req.data + " holds " + store_->meta().tokenizer +
                               " tokens but the model was trained on " + m.tokenizer + " tokens");
  }

  void tokenize_text_file(const EvalRequest& req, const LoadedModel& m, EvalResult& r) {
    const std::string name = !req.tokenizer.empty() ? req.tokenizer : m.tokenizer;
    if (name.empty())
      throw std::runtime_error(r.model + " does not say its tokenizer (vocab " + std::to_string(m.config.vocab_size) +
                               "): give --tokenizer byte|gpt2");
    TextTokenizer tok = TextTokenizer::load(name);
    text_ = tokenize_text(req.data, tok);
    vocab_ = tok.vocab_size();
    eval_ = fit_ = &text_;
    r.data = req.data + " (text, " + name + " tokenizer)";
    r.unigram_fit = "the same text (in-sample: a lower bound for any unigram model)";
  }

  std::optional<TokenStore> store_;
  TokenSplit text_;
  const TokenSplit* eval_ = nullptr;
  const TokenSplit* fit_ = nullptr;
  std::uint32_t vocab_ = 0;
};

// Windows of seq_len + 1 tokens stepping by seq_len: every token after the first is predicted
// once, from the tokens before it in its window.
struct EvalWindows {
  int seq_len = 0;
  std::int64_t count = 0;
};

EvalWindows eval_windows(const EvalRequest& req, const GptConfig& model, const TokenSplit& split,
                         const std::string& data) {
  const std::int64_t n = static_cast<std::int64_t>(split.tokens.size());
  if (n < 2) throw std::runtime_error(data + ": fewer than 2 tokens to evaluate");
  int T = req.seq_len > 0 ? req.seq_len : model.max_seq_len;
  if (T > model.max_seq_len)
    throw std::runtime_error("--seq-len " + std::to_string(T) + " exceeds the model's context of " +
                             std::to_string(model.max_seq_len));
  T = static_cast<int>(std::min<std::int64_t>(T, n - 1));
  std::int64_t windows = (n - 1) / T;
  if (req.max_tokens > 0) windows = std::max<std::int64_t>(1, std::min(windows, req.max_tokens / T));
  return {T, windows};
}

int eval_batch(int requested, const GptStage& stage, const EvalWindows& windows) {
  int B = requested;
  if (B <= 0) {  // the activations of one forward (attention probabilities dominate) within ~1 GiB
    B = 8;
    while (B > 1 && stage.activation_bytes(B, windows.seq_len) > (std::size_t{1} << 30)) B /= 2;
  }
  return static_cast<int>(std::min<std::int64_t>(B, windows.count));
}

// The model's loss summed over every predicted token of the windows, B windows a forward pass;
// the predicted tokens are appended to `predicted` (the unigram baseline is scored on the same).
double summed_window_loss(const LoadedModel& m, Backend& backend, Stream& stream, const GptStage& stage,
                          const TokenSplit& split, const EvalWindows& windows, int B, TokenSplit& predicted) {
  const int T = windows.seq_len;
  const std::size_t P = stage.layout().total_floats(), BT = static_cast<std::size_t>(B) * T;
  const std::unique_ptr<Arena> arena = backend.create_arena(
      "eval", stage.activation_bytes(B, T) + stage.scratch_bytes(B, T) + P * sizeof(float) +
                  2 * sizeof(std::int32_t) * BT + 4 * Arena::kDefaultAlignment);
  MicrobatchActivations acts = stage.allocate_activations(*arena, B, T);
  StageScratch scratch = stage.allocate_scratch(*arena, B, T);
  float* params = arena->allocate_n<float>(P, "eval.params");
  auto* device_inputs = arena->allocate_n<std::int32_t>(BT, "eval.inputs");
  auto* device_targets = arena->allocate_n<std::int32_t>(BT, "eval.targets");
  backend.copy(params, m.params.data(), P * sizeof(float), stream);
  std::vector<std::int32_t> inputs(BT), targets(BT);  // host staging
  std::vector<float> losses(BT);
  double loss_sum = 0;
  for (std::int64_t w0 = 0; w0 < windows.count; w0 += B) {
    const int rows = static_cast<int>(std::min<std::int64_t>(B, windows.count - w0));
    for (int b = 0; b < B; ++b) {  // a last partial batch repeats its first window; only `rows` count
      const std::int64_t start = (w0 + std::min(b, rows - 1)) * T;
      for (int t = 0; t < T; ++t) {
        inputs[b * T + t] = static_cast<std::int32_t>(split.tokens[start + t]);
        targets[b * T + t] = static_cast<std::int32_t>(split.tokens[start + t + 1]);
      }
    }
    backend.copy(device_inputs, inputs.data(), BT * sizeof(std::int32_t), stream);
    backend.copy(device_targets, targets.data(), BT * sizeof(std::int32_t), stream);
    stage.forward(params, nullptr, acts, scratch, device_inputs, nullptr, device_targets, 1.0f);
    backend.copy(losses.data(), acts.losses, BT * sizeof(float), stream);
    stream.synchronize();
    for (int i = 0; i < rows * T; ++i) {
      loss_sum += losses[i];
      predicted.tokens.push_back(static_cast<std::uint32_t>(targets[i]));
    }
  }
  return loss_sum;
}

}  // namespace

EvalResult evaluate(const EvalRequest& req) {
  if (req.split != "valid" && req.split != "train")
    throw std::runtime_error("--split " + req.split + ": expected valid or train");
  BackendOptions backend_options;
  backend_options.threads = req.threads;
  const std::unique_ptr<Backend> backend = BackendRegistry::with_builtins().create("cpu", backend_options);
  const std::unique_ptr<Stream> stream = backend->create_stream(StreamPriority::High);
  const LoadedModel m = load_model(req.model);
  EvalResult r;
  r.model = m.description;
  const EvalTokens tokens(req, m, r);
  const EvalWindows windows = eval_windows(req, m.config, tokens.evaluated(), r.data);
  GptStage stage(m.config, StageRange::whole(m.config), *backend, *stream);
  const int B = eval_batch(req.batch, stage, windows);

  const auto t0 = std::chrono::steady_clock::now();
  TokenSplit predicted;
  predicted.doc_offsets.push_back(0);
  const double loss_sum = summed_window_loss(m, *backend, *stream, stage, tokens.evaluated(), windows, B, predicted);
  predicted.doc_offsets.push_back(predicted.tokens.size());
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.tokens = static_cast<std::int64_t>(predicted.tokens.size());
  r.windows = windows.count;
  r.seq_len = windows.seq_len;
  r.batch = B;
  r.loss = loss_sum / static_cast<double>(r.tokens);
  r.perplexity = std::exp(r.loss);
  r.unigram_loss = unigram_cross_entropy(tokens.unigram_fit(), predicted, tokens.vocab());
  r.unigram_perplexity = std::exp(r.unigram_loss);
  return r;
}

int eval_command(int argc, char** argv) {
  EvalRequest req;
  bool json = false;
  SubcommandOptions options(
      "eval", "--model PATH --data FILE [options]",
      "Loss (nats/token) and perplexity of a model on a token file's split or on a text file\n"
      "tokenised on the fly, next to the unigram baseline (a model that ignores context). The text\n"
      "is cut into windows of seq_len + 1 tokens stepping by seq_len, so every token but the first\n"
      "is predicted once; a last partial window is dropped. This is the whole split's loss;\n"
      "`pipelane train`'s val loss is over the first [train] eval_batches x micro_batch windows\n"
      "(give --max-tokens eval_batches x micro_batch x seq_len for that figure).");
  options.add_options()
      ("model", po::value(&req.model), "a checkpoint directory (any grid), a run directory (its newest checkpoint) or a Hugging Face model directory")
      ("checkpoint", po::value(&req.model), "the same as --model")
      ("data", po::value(&req.data), "a token file (.h5, Megatron .bin/.idx, llm.c .bin) or text (.txt, .jsonl, .gz)")
      ("split", value_with_default(&req.split), "the token file's split: valid or train")
      ("tokenizer", po::value(&req.tokenizer), "for text: byte, gpt2, cl100k, o200k, llama3, hf:PATH/tokenizer.json or spm:PATH.model "
                    "(default: the model's)")
      ("seq-len", value_with_default(&req.seq_len), "tokens of context per window; 0: the model's")
      ("batch", value_with_default(&req.batch), "windows per forward pass; 0: what fits in ~1 GiB")
      ("max-tokens", value_with_default(&req.max_tokens), "evaluate at most this many tokens; 0: all")
      ("threads", value_with_default(&req.threads), "CPU threads; 0: all cores")
      ("json", po::bool_switch(&json), "print one JSON object instead of the table");
  if (const auto code = options.parse(argc, argv, [&] {
        if (req.model.empty() || req.data.empty()) throw OptionError("--model and --data are required");
        if (req.seq_len < 0 || req.batch < 0 || req.max_tokens < 0 || req.threads < 0)
          throw OptionError("--seq-len, --batch, --max-tokens and --threads must be >= 0");
      }))
    return *code;
  try {
    const EvalResult r = evaluate(req);
    if (json) {
      std::printf("%s\n", r.to_json().dump().c_str());
      return 0;
    }
    std::printf("model    %s\ndata     %s\n         %lld tokens in %lld windows of %d (batch %d), %.1f s\n\n",
                r.model.c_str(), r.data.c_str(), static_cast<long long>(r.tokens), static_cast<long long>(r.windows),
                r.seq_len, r.batch, r.seconds);
    std::printf("                 loss (nats/token)   perplexity\n");
    std::printf("  model          %17.4f   %10.2f\n", r.loss, r.perplexity);
    std::printf("  unigram        %17.4f   %10.2f   (fitted on %s)\n", r.unigram_loss, r.unigram_perplexity,
                r.unigram_fit.c_str());
    std::printf("\n  %s\n", r.loss < r.unigram_loss ? "the model beats the unigram baseline"
                                                    : "the model does NOT beat the unigram baseline");
    // Not the figure `train` prints as val loss unless --max-tokens picks the same windows.
    std::printf("  the loss over %s; `pipelane train`'s val loss covers the split's first [train] eval_batches x "
                "micro_batch windows (--max-tokens = that x seq_len gives it)\n",
                req.max_tokens > 0 ? "the first --max-tokens of the data" : "every window of the data");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipelane eval: %s\n", e.what());
    return 1;
  }
}

}  // namespace pipelane
