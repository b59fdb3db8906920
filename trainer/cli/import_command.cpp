#include "trainer/cli/import_command.h"

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <stdexcept>

#include <boost/program_options.hpp>

#include "trainer/cli/command_options.h"

#include "trainer/checkpoint/checkpoint.h"
#include "trainer/hf/model_source.h"
#include "trainer/config/train_options.h"

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
  config.model = model_options_from(m.config);
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
  CheckpointTopology topology;  // one process, as a fresh run of the model would be
  topology.imported_from = input_dir;
  write_manifest(output, make_manifest(0, m.config, topology, config.to_ini(), {shard}));
  const std::string family = m.config.arch == ModelArch::Llama ? "Llama-family " : "GPT-2 ";
  return family + std::to_string(m.config.layers) + " layers, d_model " + std::to_string(m.config.d_model) + ", " +
         std::to_string(m.config.heads) + " heads, context " + std::to_string(m.config.max_seq_len) + ", vocab " +
         std::to_string(m.config.vocab_size) + (m.tokenizer.empty() ? "" : " (" + m.tokenizer + " tokenizer)");
}

int import_command(int argc, char** argv) {
  std::string format = "safetensors", input, output;
  SubcommandOptions options(
      "import", "--format safetensors --input DIR --output CHECKPOINT",
      "Reads a Hugging Face GPT-2 directory (model.safetensors + config.json: Conv1D weights,\n"
      "tied head, as GPT2LMHeadModel.save_pretrained and `pipelane export` write it), or a\n"
      "LlamaForCausalLM, MistralForCausalLM or Qwen2ForCausalLM one (model.safetensors or a\n"
      "sharded model.safetensors.index.json), into a\n"
      "pipelane checkpoint (step 0, zero AdamW moments). Fine-tune from it at any grid with\n"
      "  pipelane train --config FILE --run.init_from=CHECKPOINT\n"
      "where FILE's [model] matches the imported shape.");
  options.add_options()
      ("format", value_with_default(&format), "input format (safetensors)")
      ("input", po::value(&input), "the Hugging Face model directory")
      ("output", po::value(&output), "the checkpoint directory to write");
  if (const auto code = options.parse(argc, argv, [&] {
        if (input.empty() || output.empty()) throw OptionError("--input and --output are required");
        if (format != "safetensors") throw OptionError("unknown --format '" + format + "' (supported: safetensors)");
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
