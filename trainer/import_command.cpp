#include "trainer/import_command.h"

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <stdexcept>

#include <boost/program_options.hpp>

#include "trainer/command_options.h"

#include "trainer/checkpoint.h"
#include "trainer/model_source.h"
#include "trainer/train_options.h"

namespace pipelane {

namespace fs = std::filesystem;
namespace po = boost::program_options;

std::string import_hf_gpt2(const std::string& input_dir, const std::string& output) {
  if (fs::exists(fs::path(output) / kManifestName))
    throw std::runtime_error(output + ": already holds a checkpoint (remove it, or choose another --output)");
  LoadedModel m = load_hf_model(input_dir);
  TrainingProgress progress;
  progress.step = 0;
  progress.lr_schedule = nlohmann::json::object();
  progress.sampler = {kWeightsOnlySampler, {}};
  TrainOptions config;  // what the weights need: the model shape and the tokenizer
  config.model = {m.config.layers, m.config.d_model, m.config.heads, m.config.max_seq_len, m.config.vocab_size};
  if (!m.tokenizer.empty()) config.data.tokenizer = m.tokenizer;
  std::error_code ec;
  fs::create_directories(output, ec);
  if (ec) throw std::runtime_error(output + ": cannot create (" + ec.message() + ")");
  // The weights are in host memory; the AdamW moments start at zero.
  std::vector<const ParamEntry*> tensors;
  for (const ParamEntry& e : m.layout->entries()) tensors.push_back(&e);
  const StageTensorOut from_host = [&m](TensorGroup g, const ParamEntry& e, float* staging) {
    for (std::size_t i = 0; i < e.numel; ++i) staging[i] = g == TensorGroup::Params ? m.params[e.offset + i] : 0.f;
  };
  const ShardRecord shard = write_shard(output, 0, 0, tensors, from_host, progress);
  const nlohmann::json topology = {{"tp", 1}, {"pp", 1}, {"dp", 1}, {"schedule", "1f1b"}, {"virtual_stages", 1},
                                   {"layers_per_stage", ""}, {"imported_from", input_dir}};
  write_manifest(output, make_manifest(0, m.config, topology, config.to_ini(), {shard}));
  return "GPT-2 " + std::to_string(m.config.layers) + " layers, d_model " + std::to_string(m.config.d_model) + ", " +
         std::to_string(m.config.heads) + " heads, context " + std::to_string(m.config.max_seq_len) + ", vocab " +
         std::to_string(m.config.vocab_size) + (m.tokenizer.empty() ? "" : " (" + m.tokenizer + " tokenizer)");
}

int import_command(int argc, char** argv) {
  std::string format = "safetensors", input, output;
  po::options_description desc(
      "usage: pipelane import --format safetensors --input DIR --output CHECKPOINT\n\n"
      "Reads a Hugging Face GPT-2 directory (model.safetensors + config.json: Conv1D weights,\n"
      "tied head, as GPT2LMHeadModel.save_pretrained and `pipelane export` write it) into a\n"
      "pipelane checkpoint (step 0, zero AdamW moments). Fine-tune from it at any grid with\n"
      "  pipelane train --config FILE --run.init_from=CHECKPOINT\n"
      "where FILE's [model] matches the imported shape.\n\noptions");
  desc.add_options()("help,h", "print this help")
      ("format", po::value(&format)->default_value(format), "input format (safetensors)")
      ("input", po::value(&input), "the Hugging Face model directory")
      ("output", po::value(&output), "the checkpoint directory to write");
  if (const auto code = parse_command_options("import", argc, argv, desc, [&] {
        if (input.empty() || output.empty()) throw po::error("--input and --output are required");
        if (format != "safetensors") throw po::error("unknown --format '" + format + "' (supported: safetensors)");
      }))
    return *code;
  try {
    const std::string what = import_hf_gpt2(input, output);
    std::printf("pipelane import: %s -> %s (%s)\n", input.c_str(), output.c_str(), what.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipelane import: %s\n", e.what());
    return 1;
  }
}

}  // namespace pipelane
