#include "trainer/cli/export_command.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <vector>

#include "trainer/checkpoint/checkpoint.h"
#include "trainer/cli/command_options.h"
#include "trainer/hf/hf_gpt2.h"
#include "trainer/hf/hf_llama_io.h"
#include "trainer/hf/safetensors.h"

namespace pipelane {

namespace fs = std::filesystem;
namespace po = boost::program_options;

nlohmann::json export_hf_gpt2(const std::string& checkpoint_dir, const std::string& output) {
  CheckpointReader reader(checkpoint_dir);
  const GptConfig cfg = reader.model();
  const std::int64_t C = cfg.d_model, V = cfg.vocab_size;
  std::vector<SafetensorOut> out;
  for (const HfGpt2Tensor& t : hf_gpt2_tensors(cfg)) {
    std::vector<std::int64_t> shape;
    std::vector<float> d = reader.full_tensor("params", t.ours, &shape);
    if (t.ours == "wte") {
      d.resize(static_cast<std::size_t>(V * C));  // the padding rows are not tokens
      out.push_back({t.hf, {V, C}, std::move(d)});
    } else if (t.conv1d) {
      out.push_back({t.hf, {shape[1], shape[0]}, transpose(d, shape[0], shape[1])});
    } else {
      out.push_back({t.hf, shape, std::move(d)});
    }
  }
  // lm_head.weight is tied to transformer.wte.weight (tie_word_embeddings), so it is not stored,
  // as in Hugging Face's own GPT-2 files.

  std::error_code ec;
  fs::create_directories(output, ec);
  if (ec) throw std::runtime_error(output + ": cannot create (" + ec.message() + ")");
  write_safetensors((fs::path(output) / "model.safetensors").string(), out,
                    {{"format", "pt"}, {"producer", "pipelane export"}});
  const nlohmann::json config =
      hf_gpt2_config(cfg, {{"checkpoint", checkpoint_dir}, {"step", reader.step()}});
  std::ofstream cfg_out(fs::path(output) / "config.json", std::ios::trunc);
  cfg_out << config.dump(2) << '\n';
  if (!cfg_out) throw std::runtime_error(output + "/config.json: cannot write");
  return config;
}

int export_command(int argc, char** argv) {
  std::string checkpoint, format = "safetensors", output;
  SubcommandOptions options(
      "export", "--checkpoint DIR --format safetensors --output DIR",
      "Writes a checkpoint (saved at any pp x tp) as a Hugging Face model directory:\n"
      "model.safetensors with GPT2LMHeadModel's tensor names and shapes, and config.json;\n"
      "an arch = llama model as LlamaForCausalLM (Qwen2ForCausalLM with bias = qkv).");
  options.add_options()
      ("checkpoint", po::value(&checkpoint), "the checkpoint directory (a step_N directory of a run's checkpoints), or a run directory: its newest")
      ("format", value_with_default(&format), "output format (safetensors)")
      ("output", po::value(&output), "the model directory to write (created)");
  if (const auto code = options.parse(argc, argv, [&] {
        if (checkpoint.empty() || output.empty()) throw OptionError("--checkpoint and --output are required");
        if (format != "safetensors") throw OptionError("unknown --format '" + format + "' (supported: safetensors)");
      }))
    return *code;
  try {
    checkpoint = checkpoint_of(checkpoint);
    if (CheckpointReader(checkpoint).model().arch == ModelArch::Llama) {
      const nlohmann::json cfg = export_hf_llama(checkpoint, output);
      std::printf("pipelane export: %s -> %s (model.safetensors, config.json; %s %d layers, d_model %d)\n",
                  checkpoint.c_str(), output.c_str(), cfg["architectures"][0].get<std::string>().c_str(),
                  cfg["num_hidden_layers"].get<int>(), cfg["hidden_size"].get<int>());
      return 0;
    }
    const nlohmann::json cfg = export_hf_gpt2(checkpoint, output);
    std::printf("pipelane export: %s -> %s (model.safetensors, config.json; GPT-2 %d layers, d_model %d)\n",
                checkpoint.c_str(), output.c_str(), cfg["n_layer"].get<int>(), cfg["n_embd"].get<int>());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipelane export: %s\n", e.what());
    return 1;
  }
}

}  // namespace pipelane
