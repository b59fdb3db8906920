#include "trainer/eval_command.h"

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

#include "trainer/command_options.h"

#include "datasets/text_documents.h"
#include "datasets/token_store.h"
#include "datasets/unigram.h"
#include "model/gpt_model.h"
#include "runtime/arena.h"
#include "runtime/backend_registry.h"
#include "trainer/model_source.h"
#include "trainer/text_tokenizer.h"

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

  // The tokens, and what the unigram baseline is fitted on.
  TokenSplit text_tokens;
  const TokenSplit* eval_split = nullptr;
  const TokenSplit* fit_split = nullptr;
  std::optional<TokenStore> store;
  std::uint32_t vocab = 0;
  if (!fs::exists(req.data)) throw std::runtime_error(req.data + ": no such file");
  if (is_token_file(req.data)) {
    store.emplace(TokenStore::open(req.data));
    vocab = store->meta().vocab_size;
    eval_split = req.split == "valid" ? &store->valid() : &store->train();
    fit_split = &store->train();
    r.data = req.data + " (" + req.split + " split, " + store->meta().tokenizer + " tokens)";
    r.unigram_fit = "the file's train split";
    if (!req.tokenizer.empty() && req.tokenizer != store->meta().tokenizer)
      throw std::runtime_error(req.data + " holds " + store->meta().tokenizer + " tokens, not --tokenizer " + req.tokenizer);
    if (!m.tokenizer.empty() && m.tokenizer != store->meta().tokenizer)
      throw std::runtime_error(req.data + " holds " + store->meta().tokenizer + " tokens but the model was trained on " +
                               m.tokenizer + " tokens");
  } else {
    const std::string name = !req.tokenizer.empty() ? req.tokenizer : m.tokenizer;
    if (name.empty())
      throw std::runtime_error(r.model + " does not say its tokenizer (vocab " + std::to_string(m.config.vocab_size) +
                               "): give --tokenizer byte|gpt2");
    TextTokenizer tok = TextTokenizer::load(name);
    text_tokens = tokenize_text(req.data, tok);
    vocab = tok.vocab_size();
    eval_split = fit_split = &text_tokens;
    r.data = req.data + " (text, " + name + " tokenizer)";
    r.unigram_fit = "the same text (in-sample: a lower bound for any unigram model)";
  }
  if (static_cast<int>(vocab) > m.config.vocab_size)
    throw std::runtime_error(req.data + ": vocabulary of " + std::to_string(vocab) + " tokens, the model has " +
                             std::to_string(m.config.vocab_size));

  // Windows of T+1 tokens stepping by T: every token after the first is predicted once, from the
  // tokens before it in its window.
  const std::int64_t n = static_cast<std::int64_t>(eval_split->tokens.size());
  if (n < 2) throw std::runtime_error(r.data + ": fewer than 2 tokens to evaluate");
  int T = req.seq_len > 0 ? req.seq_len : m.config.max_seq_len;
  if (T > m.config.max_seq_len)
    throw std::runtime_error("--seq-len " + std::to_string(T) + " exceeds the model's context of " +
                             std::to_string(m.config.max_seq_len));
  T = static_cast<int>(std::min<std::int64_t>(T, n - 1));
  std::int64_t windows = (n - 1) / T;
  if (req.max_tokens > 0) windows = std::max<std::int64_t>(1, std::min(windows, req.max_tokens / T));

  GptStage stage(m.config, StageRange::whole(m.config), *backend, *stream);
  int B = req.batch;
  if (B <= 0) {  // the activations of one forward (attention probabilities dominate) within ~1 GiB
    B = 8;
    while (B > 1 && stage.activation_bytes(B, T) > (std::size_t{1} << 30)) B /= 2;
  }
  B = static_cast<int>(std::min<std::int64_t>(B, windows));
  const std::size_t P = stage.layout().total_floats(), BT = static_cast<std::size_t>(B) * T;
  const std::unique_ptr<Arena> arena = backend->create_arena(
      "eval", stage.activation_bytes(B, T) + stage.scratch_bytes(B, T) + P * sizeof(float) +
                  2 * sizeof(std::int32_t) * BT + 4 * Arena::kDefaultAlignment);
  MicrobatchActivations acts = stage.allocate_activations(*arena, B, T);
  StageScratch scratch = stage.allocate_scratch(*arena, B, T);
  float* params = arena->allocate_n<float>(P, "eval.params");
  auto* device_inputs = arena->allocate_n<std::int32_t>(BT, "eval.inputs");
  auto* device_targets = arena->allocate_n<std::int32_t>(BT, "eval.targets");
  backend->copy(params, m.params.data(), P * sizeof(float), *stream);
  std::vector<std::int32_t> inputs(BT), targets(BT);  // host staging
  std::vector<float> losses(BT);

  const auto t0 = std::chrono::steady_clock::now();
  double loss_sum = 0;
  TokenSplit predicted;  // the targets, for the unigram baseline on exactly the same tokens
  predicted.doc_offsets.push_back(0);
  for (std::int64_t w0 = 0; w0 < windows; w0 += B) {
    const int rows = static_cast<int>(std::min<std::int64_t>(B, windows - w0));
    for (int b = 0; b < B; ++b) {  // a last partial batch repeats its first window; only `rows` count
      const std::int64_t start = (w0 + std::min(b, rows - 1)) * T;
      for (int t = 0; t < T; ++t) {
        inputs[b * T + t] = static_cast<std::int32_t>(eval_split->tokens[start + t]);
        targets[b * T + t] = static_cast<std::int32_t>(eval_split->tokens[start + t + 1]);
      }
    }
    backend->copy(device_inputs, inputs.data(), BT * sizeof(std::int32_t), *stream);
    backend->copy(device_targets, targets.data(), BT * sizeof(std::int32_t), *stream);
    stage.forward(params, nullptr, acts, scratch, device_inputs, nullptr, device_targets, 1.0f);
    backend->copy(losses.data(), acts.losses, BT * sizeof(float), *stream);
    stream->synchronize();
    for (int i = 0; i < rows * T; ++i) {
      loss_sum += losses[i];
      predicted.tokens.push_back(static_cast<std::uint32_t>(targets[i]));
    }
  }
  predicted.doc_offsets.push_back(predicted.tokens.size());
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.tokens = static_cast<std::int64_t>(predicted.tokens.size());
  r.windows = windows;
  r.seq_len = T;
  r.batch = B;
  r.loss = loss_sum / static_cast<double>(r.tokens);
  r.perplexity = std::exp(r.loss);
  r.unigram_loss = unigram_cross_entropy(*fit_split, predicted, vocab);
  r.unigram_perplexity = std::exp(r.unigram_loss);
  return r;
}

int eval_command(int argc, char** argv) {
  EvalRequest req;
  bool json = false;
  po::options_description desc(
      "usage: pipelane eval --model PATH --data FILE [options]\n\n"
      "Loss (nats/token) and perplexity of a model on a token file's split or on a text file\n"
      "tokenised on the fly, next to the unigram baseline (a model that ignores context). The text\n"
      "is cut into windows of seq_len + 1 tokens stepping by seq_len, so every token but the first\n"
      "is predicted once; a last partial window is dropped.\n\noptions");
  desc.add_options()("help,h", "print this help")
      ("model", po::value(&req.model), "a checkpoint directory (any grid) or a Hugging Face GPT-2 directory")
      ("checkpoint", po::value(&req.model), "the same as --model")
      ("data", po::value(&req.data), "a token file (.h5, Megatron .bin/.idx, llm.c .bin) or text (.txt, .jsonl, .gz)")
      ("split", po::value(&req.split)->default_value(req.split), "the token file's split: valid or train")
      ("tokenizer", po::value(&req.tokenizer), "byte or gpt2, for text (default: the model's)")
      ("seq-len", po::value(&req.seq_len)->default_value(0), "tokens of context per window; 0: the model's")
      ("batch", po::value(&req.batch)->default_value(0), "windows per forward pass; 0: what fits in ~1 GiB")
      ("max-tokens", po::value(&req.max_tokens)->default_value(0), "evaluate at most this many tokens; 0: all")
      ("threads", po::value(&req.threads)->default_value(0), "CPU threads; 0: all cores")
      ("json", po::bool_switch(&json), "print one JSON object instead of the table");
  if (const auto code = parse_command_options("eval", argc, argv, desc, [&] {
        if (req.model.empty() || req.data.empty()) throw po::error("--model and --data are required");
        if (req.seq_len < 0 || req.batch < 0 || req.max_tokens < 0 || req.threads < 0)
          throw po::error("--seq-len, --batch, --max-tokens and --threads must be >= 0");
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
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipelane eval: %s\n", e.what());
    return 1;
  }
}

}  // namespace pipelane
