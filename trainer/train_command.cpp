#include "trainer/train_command.h"

#include <cmath>
#include <cstdio>
#include <iostream>

#include "datasets/data_error.h"
#include "datasets/token_store.h"
#include "datasets/unigram.h"
#include "runtime/ops.h"
#include "trainer/single_process_trainer.h"
#include "trainer/train_options.h"

namespace pipelane {

namespace {

// Checks that need both the configuration and the data; one line naming what to change.
void check_data_fits_model(const TrainOptions& o, const TokenStore& data) {
  const std::string where = o.data.path;
  if (data.meta().tokenizer != o.data.tokenizer)
    throw ConfigError(where + ": tokenized with '" + data.meta().tokenizer + "' but [data] tokenizer = " +
                      o.data.tokenizer);
  if (data.meta().vocab_size > static_cast<std::uint32_t>(o.model.vocab_size))
    throw ConfigError(where + ": vocabulary of " + std::to_string(data.meta().vocab_size) +
                      " tokens does not fit [model] vocab_size = " + std::to_string(o.model.vocab_size));
  const std::size_t need = static_cast<std::size_t>(o.model.seq_len) + 1;
  if (data.train().tokens.size() < need)
    throw ConfigError(where + ": the train split has " + std::to_string(data.train().tokens.size()) +
                      " tokens, fewer than [model] seq_len + 1 = " + std::to_string(need));
  if (o.train.eval_every > 0 && data.valid().tokens.size() < need)
    throw ConfigError(where + ": the validation split has " +
                      std::to_string(data.valid().tokens.size()) +
                      " tokens, fewer than [model] seq_len + 1 = " + std::to_string(need) +
                      " (set [train] eval_every = 0 to train without validation)");
}

std::string human_bytes(double b) {
  char buf[32];
  if (b >= 1 << 30) std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1 << 30));
  else std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1 << 20));
  return buf;
}

}  // namespace

int train_command(int argc, char** argv) {
  try {
    const TrainOptions opts = parse_train_options(argc, argv);
    if (opts.help_requested) {
      std::cout << train_options_help();
      return 0;
    }
    // Everything that can be checked before anything is written is checked first, so a bad
    // config or missing data never leaves a run directory behind.
    const TokenStore data = TokenStore::open(opts.data.path);
    check_data_fits_model(opts, data);

    auto device = make_cpu_device(opts.train.threads);
    const double peak = opts.train.peak_gflops > 0 ? opts.train.peak_gflops
                                                   : cpu::measure_sgemm_gflops(1536, 4);
    SingleProcessTrainer trainer(opts, data, *device, peak);
    const GptConfig cfg = gpt_config_from(opts.model);
    std::printf("pipelane train: %d layers, d_model %d, %d heads, seq_len %d, vocab %d (padded %d): "
                "%.2fM parameters\n",
                cfg.layers, cfg.d_model, cfg.heads, cfg.max_seq_len, cfg.vocab_size,
                cfg.padded_vocab(), (cfg.non_embedding_params() +
                                     double(cfg.padded_vocab() + cfg.max_seq_len) * cfg.d_model) / 1e6);
    std::printf("  data %s: %zu train / %zu validation tokens (%s tokenizer)\n", opts.data.path.c_str(),
                data.train().tokens.size(), data.valid().tokens.size(), data.meta().tokenizer.c_str());
    std::printf("  %s, sgemm peak %.0f GFLOP/s%s, training arena %s\n", device->name().c_str(), peak,
                opts.train.peak_gflops > 0 ? " (from config)" : " (measured)",
                human_bytes(static_cast<double>(trainer.arena_bytes())).c_str());
    std::fflush(stdout);

    RunDirectory run(opts.run.dir, opts.to_ini());
    nlohmann::json summary = trainer.run(run, stdout);
    const double unigram = unigram_cross_entropy(data.train(), data.valid(), data.meta().vocab_size);
    summary["unigram_val_loss"] = unigram;
    summary["config"] = opts.config_path;
    run.write_summary(summary);

    std::printf("\nSummary\n");
    std::printf("  trained      %d steps, %.2fM tokens in %.1f s: %.0f tokens/s, MFU %.1f%%\n",
                opts.train.steps, summary["tokens"].get<double>() / 1e6,
                summary["train_seconds"].get<double>(), summary["tokens_per_s"].get<double>(),
                100.0 * summary["mfu"].get<double>());
    std::printf("  train loss   %.4f (final step)\n", summary["final_loss"].get<double>());
    if (!summary["final_val_loss"].is_null()) {
      const double val = summary["final_val_loss"].get<double>();
      std::printf("  val loss     %.4f nats/token vs unigram baseline %.4f: %s\n", val, unigram,
                  val < unigram ? "the model beats the unigram model" : "NOT below the unigram model");
    }
    std::printf("  run dir      %s (config.ini, metrics.jsonl, summary.json)\n", opts.run.dir.c_str());
    return 0;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "pipelane train: %s\n", e.what());
    return 2;
  } catch (const DataError& e) {
    std::fprintf(stderr, "pipelane train: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipelane train: %s\n", e.what());
    return 1;
  }
}

}  // namespace pipelane
