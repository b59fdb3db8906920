#include "trainer/generate_command.h"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>

#include <boost/program_options.hpp>

#include "trainer/command_options.h"
#include <nlohmann/json.hpp>

#include "model/gpt_decoder.h"
#include "runtime/backend_registry.h"
#include "trainer/model_source.h"
#include "trainer/parallel_trainer.h"
#include "trainer/text_generation.h"
#include "trainer/text_tokenizer.h"
#include "trainer/train_options.h"

namespace pipelane {

namespace po = boost::program_options;

int generate_command(int argc, char** argv) {
  std::string model_path, config_path, prompt, tokenizer_name;
  int tokens = 256, threads = 1;
  std::uint64_t seed = 1337;
  SamplingOptions sampling;
  bool json = false;
  po::options_description desc(
      "usage: pipelane generate --model PATH [options]\n\n"
      "Samples text from a model and streams it to stdout as it is produced (a KV cache keeps each\n"
      "new token one single-position pass). The same model, prompt, options and seed give the same\n"
      "text. Past the model's context the decoder continues on the newest half of the text.\n"
      "A timing line (tokens/s) goes to stderr.\n\noptions");
  desc.add_options()("help,h", "print this help")
      ("model", po::value(&model_path), "a checkpoint directory (any grid) or a Hugging Face GPT-2 directory")
      ("checkpoint", po::value(&model_path), "the same as --model")
      ("config", po::value(&config_path),
       "instead of --model: a randomly initialised model of this training config's [model] (benchmarks)")
      ("prompt", po::value(&prompt)->default_value(""), "text to continue; empty: start from <|endoftext|> (gpt2) or a newline")
      ("tokens", po::value(&tokens)->default_value(tokens), "tokens to generate")
      ("temperature", po::value(&sampling.temperature)->default_value(sampling.temperature), "0: greedy")
      ("top-k", po::value(&sampling.top_k)->default_value(sampling.top_k), "sample among the k most likely tokens; 0: all")
      ("top-p", po::value(&sampling.top_p)->default_value(sampling.top_p), "sample among the most likely tokens up to this probability mass")
      ("seed", po::value(&seed)->default_value(seed), "random seed")
      ("tokenizer", po::value(&tokenizer_name), "byte or gpt2 (default: the model's)")
      ("threads", po::value(&threads)->default_value(threads),
       "CPU threads; 0: all cores. One token at a time is a chain of small memory-bound products that "
       "synchronise the threads, so more threads help large models a little on an idle machine and "
       "slow small ones down on a busy one")
      ("json", po::bool_switch(&json), "print one JSON object (text, token ids, tokens/s) at the end instead of streaming");
  if (const auto code = parse_command_options("generate", argc, argv, desc, [&] {
        if (model_path.empty() == config_path.empty()) throw po::error("give --model PATH (or --config FILE for a random model)");
        if (tokens < 1) throw po::error("--tokens must be >= 1");
        if (sampling.temperature < 0) throw po::error("--temperature must be >= 0");
        if (sampling.top_k < 0) throw po::error("--top-k must be >= 0");
        if (!(sampling.top_p > 0 && sampling.top_p <= 1)) throw po::error("--top-p must be in (0, 1]");
        if (threads < 0) throw po::error("--threads must be >= 0");
      }))
    return *code;
  try {
    BackendOptions backend_options;
    backend_options.threads = threads;
    const std::unique_ptr<Backend> backend = BackendRegistry::with_builtins().create("cpu", backend_options);
    const std::unique_ptr<Stream> stream = backend->create_stream(StreamPriority::High);
    LoadedModel m;
    if (!config_path.empty()) {
      std::vector<std::string> args = {"train", "--config", config_path};
      std::vector<const char*> cargs;
      for (auto& a : args) cargs.push_back(a.c_str());
      const TrainOptions opts = parse_train_options(static_cast<int>(cargs.size()), cargs.data());
      m = random_model(gpt_config_from(opts.model), opts.train.seed);
      m.tokenizer = opts.data.tokenizer;
    } else {
      m = load_model(model_path);
    }
    if (!tokenizer_name.empty()) m.tokenizer = tokenizer_name;
    if (m.tokenizer.empty())
      throw std::runtime_error(m.description + " does not say its tokenizer (vocab " + std::to_string(m.config.vocab_size) +
                               "): give --tokenizer byte|gpt2");
    TextTokenizer tok = TextTokenizer::load(m.tokenizer);
    if (static_cast<int>(tok.vocab_size()) > m.config.vocab_size)
      throw std::runtime_error("the " + m.tokenizer + " tokenizer has " + std::to_string(tok.vocab_size()) +
                               " tokens, the model " + std::to_string(m.config.vocab_size));
    std::vector<std::int32_t> ids = tok.encode(prompt);
    if (ids.empty()) ids.push_back(tok.end_of_text().value_or('\n'));
    GptDecoder decoder(*m.layout, m.params.data(), *backend, *stream);
    TokenSampler sampler(sampling, seed);
    if (!json) {
      std::fputs(prompt.c_str(), stdout);
      std::fflush(stdout);
    }
    const auto t0 = std::chrono::steady_clock::now();
    double first_s = 0;
    std::string text;
    const std::vector<std::int32_t> out = generate_tokens(decoder, ids, tokens, sampler, [&](std::int32_t id) {
      if (first_s == 0) first_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const std::string piece = tok.decode(id);
      text += piece;
      if (!json) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      }
    });
    const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // The first token pays for the prompt; the rest are the steady decoding rate.
    const double rate = out.size() > 1 && total_s > first_s ? (out.size() - 1) / (total_s - first_s) : 0.0;
    if (json) {
      std::printf("%s\n", nlohmann::json{{"model", m.description}, {"prompt", prompt}, {"prompt_tokens", ids.size()},
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
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\npipelane generate: %s\n", e.what());
    return 1;
  }
}

}  // namespace pipelane
