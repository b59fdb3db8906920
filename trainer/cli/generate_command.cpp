#include "trainer/cli/generate_command.h"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>

#include <boost/program_options.hpp>

#include "trainer/cli/command_options.h"
#include <nlohmann/json.hpp>

#include "model/gpt_decoder.h"
#include "runtime/backend_registry.h"
#include "trainer/hf/model_source.h"
#include "trainer/run/parallel_trainer.h"
#include "trainer/hf/text_generation.h"
#include "trainer/hf/text_tokenizer.h"
#include "trainer/config/train_options.h"

namespace pipelane {

namespace po = boost::program_options;

namespace {

struct GenerateRequest {
  std::string model_path, config_path, prompt, tokenizer_name;
  int tokens = 256, threads = 1;
  std::uint64_t seed = 1337;
  SamplingOptions sampling;
  bool json = false;
};

// The model to sample from: a checkpoint or Hugging Face directory, or (--config) a random one of
// a training config's [model]; its tokenizer, --tokenizer first.
LoadedModel generation_model(const GenerateRequest& req) {
  LoadedModel m;
  if (!req.config_path.empty()) {
    const TrainOptions opts = train_options_from_arguments({"--config", req.config_path});
    m = random_model(gpt_config_from(opts.model), opts.train.seed);
    m.tokenizer = opts.data.tokenizer;
  } else {
    m = load_model(req.model_path);
  }
  if (!req.tokenizer_name.empty()) m.tokenizer = req.tokenizer_name;
  if (m.tokenizer.empty())
    throw std::runtime_error(m.description + " does not say its tokenizer (vocab " + std::to_string(m.config.vocab_size) +
                             "): give --tokenizer byte|gpt2");
  return m;
}

// Samples req.tokens tokens after the prompt, streamed to stdout as they come unless --json, then
// prints the JSON or the timing line.
void generate(const GenerateRequest& req) {
  BackendOptions backend_options;
  backend_options.threads = req.threads;
  const std::unique_ptr<Backend> backend = BackendRegistry::with_builtins().create("cpu", backend_options);
  const std::unique_ptr<Stream> stream = backend->create_stream(StreamPriority::High);
  const LoadedModel m = generation_model(req);
  TextTokenizer tok = TextTokenizer::load(m.tokenizer);
  if (static_cast<int>(tok.vocab_size()) > m.config.vocab_size)
    throw std::runtime_error("the " + m.tokenizer + " tokenizer has " + std::to_string(tok.vocab_size()) +
                             " tokens, the model " + std::to_string(m.config.vocab_size));
  std::vector<std::int32_t> ids = tok.encode(req.prompt);
  if (ids.empty()) ids.push_back(tok.end_of_text().value_or('\n'));
  GptDecoder decoder(*m.layout, m.params.data(), *backend, *stream);
  TokenSampler sampler(req.sampling, req.seed);
  if (!req.json) {
    std::fputs(req.prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  const auto t0 = std::chrono::steady_clock::now();
  double first_s = 0;
  std::string text;
  const std::vector<std::int32_t> out = generate_tokens(decoder, ids, req.tokens, sampler, [&](std::int32_t id) {
    if (first_s == 0) first_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string piece = tok.decode(id);
    text += piece;
    if (!req.json) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
  });
  const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The first token pays for the prompt; the rest are the steady decoding rate.
  const double rate = out.size() > 1 && total_s > first_s ? (out.size() - 1) / (total_s - first_s) : 0.0;
  if (req.json) {
    std::printf("%s\n", nlohmann::json{{"model", m.description}, {"prompt", req.prompt}, {"prompt_tokens", ids.size()},
                                       {"text", text}, {"tokens", out}, {"seconds", total_s},
                                       {"first_token_s", first_s}, {"tokens_per_s", rate},
                                       {"threads", backend->threads()}}
                            .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                            .c_str());
  } else {
    std::printf("\n");
    std::fprintf(stderr, "pipelane generate: %zu tokens in %.2f s (prompt of %zu tokens and first token %.3f s, then %.1f tokens/s; %d threads)\n",
                 out.size(), total_s, ids.size(), first_s, rate, backend->threads());
  }
}

}  // namespace

int generate_command(int argc, char** argv) {
  GenerateRequest req;
  SubcommandOptions options(
      "generate", "--model PATH [options]",
      "Samples text from a model and streams it to stdout as it is produced (a KV cache keeps each\n"
      "new token one single-position pass). The same model, prompt, options and seed give the same\n"
      "text. Past the model's context the decoder continues on the newest half of the text.\n"
      "A timing line (tokens/s) goes to stderr.");
  options.add_options()
      ("model", po::value(&req.model_path), "a checkpoint directory (any grid), a run directory (its newest checkpoint) or a Hugging Face model directory")
      ("checkpoint", po::value(&req.model_path), "the same as --model")
      ("config", po::value(&req.config_path),
       "instead of --model: a randomly initialised model of this training config's [model] (benchmarks)")
      ("prompt", po::value(&req.prompt)->default_value(""), "text to continue; empty: start from <|endoftext|> (gpt2) or a newline")
      ("tokens", value_with_default(&req.tokens), "tokens to generate")
      ("temperature", value_with_default(&req.sampling.temperature), "0: greedy")
      ("top-k", value_with_default(&req.sampling.top_k), "sample among the k most likely tokens; 0: all")
      ("top-p", value_with_default(&req.sampling.top_p), "sample among the most likely tokens up to this probability mass")
      ("seed", value_with_default(&req.seed), "random seed")
      ("tokenizer", po::value(&req.tokenizer_name), "byte, gpt2, cl100k, o200k, llama3, hf:PATH/tokenizer.json or spm:PATH.model "
                    "(default: the model's)")
      ("threads", value_with_default(&req.threads),
       "CPU threads; 0: all cores. One token at a time is a chain of small memory-bound products that "
       "synchronise the threads, so more threads help large models a little on an idle machine and "
       "slow small ones down on a busy one")
      ("json", po::bool_switch(&req.json), "print one JSON object (text, token ids, tokens/s) at the end instead of streaming");
  if (const auto code = options.parse(argc, argv, [&] {
        if (req.model_path.empty() == req.config_path.empty())
          throw OptionError("give --model PATH (or --config FILE for a random model)");
        if (req.tokens < 1) throw OptionError("--tokens must be >= 1");
        if (req.sampling.temperature < 0) throw OptionError("--temperature must be >= 0");
        if (req.sampling.top_k < 0) throw OptionError("--top-k must be >= 0");
        if (!(req.sampling.top_p > 0 && req.sampling.top_p <= 1)) throw OptionError("--top-p must be in (0, 1]");
        if (req.threads < 0) throw OptionError("--threads must be >= 0");
      }))
    return *code;
  try {
    generate(req);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\npipelane generate: %s\n", e.what());
    return 1;
  }
}

}  // namespace pipelane
