#include "trainer/hf/model_source.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "model/gpt_model.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/checkpoint/model_json.h"
#include "trainer/hf/hf_gpt2.h"
#include "trainer/hf/hf_llama.h"
#include "trainer/hf/hf_llama_io.h"
#include "trainer/hf/hf_weights.h"
#include "trainer/config/ini_scan.h"
#include "trainer/hf/safetensors.h"

namespace pipelane {

namespace fs = std::filesystem;

namespace {

LoadedModel empty_model(const GptConfig& cfg) {
  LoadedModel m;
  m.config = cfg;
  m.layout = std::make_unique<ParamLayout>(cfg, StageRange::whole(cfg));
  m.params.assign(m.layout->total_floats(), 0.f);
  return m;
}

// [data] tokenizer of the config a checkpoint was saved with ("" when absent).
std::string tokenizer_of_config(const std::string& ini) {
  std::istringstream in(ini);
  try {
    for (const IniEntry& e : scan_ini(in).entries)
      if (e.section == "data" && e.key == "tokenizer") return e.value;
  } catch (const IniSyntaxError&) {
  }
  return "";
}

// GPT-2's vocabulary size says GPT-2 BPE; 256 says bytes; anything else is unknown.
std::string tokenizer_of_vocab(int vocab) { return vocab == 50257 ? "gpt2" : vocab == 256 ? "byte" : ""; }

}  // namespace

LoadedModel load_checkpoint_model(const std::string& checkpoint_dir) {
  CheckpointReader reader(checkpoint_dir);
  LoadedModel m = empty_model(reader.model());
  reader.load_into(*m.layout, m.params.data(), nullptr, nullptr);
  m.step = reader.step();
  m.tokenizer = tokenizer_of_config(reader.manifest().value("config", std::string("")));
  if (m.tokenizer.empty()) m.tokenizer = tokenizer_of_vocab(m.config.vocab_size);
  m.description = "checkpoint " + checkpoint_dir + " (step " + std::to_string(m.step) + ")";
  return m;
}

LoadedModel load_hf_model(const std::string& dir) {
  const fs::path config_path = fs::path(dir) / "config.json", weights = fs::path(dir) / "model.safetensors";
  if (!fs::exists(config_path)) throw std::runtime_error(dir + ": no config.json (a Hugging Face GPT-2 directory has one)");
  nlohmann::json config;
  try {
    std::ifstream in(config_path);
    config = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(config_path.string() + ": not valid JSON (" + e.what() + ")");
  }
  if (is_hf_llama_family(config)) return load_hf_llama_model(dir, config, config_path.string());
  if (!fs::exists(weights)) throw std::runtime_error(dir + ": no model.safetensors");
  LoadedModel m = empty_model(gpt_config_from_hf(config, config_path.string()));
  const SafetensorsReader file(weights.string());
  const GptConfig& cfg = m.config;
  const std::string where = weights.string() + ": ";

  std::vector<std::string> used;
  const auto stored_name = [&](const std::string& hf) -> std::string {
    if (file.has(hf)) return hf;
    const std::string bare = hf.substr(std::string("transformer.").size());  // the original gpt2 files
    if (file.has(bare)) return bare;
    throw SafetensorsError(where + "no tensor '" + hf + "' (GPT-2 with n_layer = " + std::to_string(cfg.layers) + ")");
  };
  const auto shape_text = [](const std::vector<std::int64_t>& s) {
    std::string t = "[";
    for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
    return t + "]";
  };
  std::vector<float> wte;
  for (const HfGpt2Tensor& t : hf_gpt2_tensors(cfg)) {
    const ParamEntry* e = m.layout->find(t.ours);
    const std::string name = stored_name(t.hf);
    used.push_back(name);
    std::vector<std::int64_t> expected = e->full_shape;
    if (t.ours == "wte") expected[0] = cfg.vocab_size;
    if (t.conv1d) std::swap(expected[0], expected[1]);
    const SafetensorInfo& info = file.tensors().at(name);
    if (info.shape != expected)
      throw SafetensorsError(where + "tensor '" + name + "' has shape " + shape_text(info.shape) + " but config.json says " +
                             shape_text(expected));
    std::vector<float> data = file.read_f32(name);
    if (t.conv1d) data = transpose(data, expected[0], expected[1]);
    std::copy(data.begin(), data.end(), m.params.begin() + static_cast<std::ptrdiff_t>(e->offset));
    if (t.ours == "wte") wte = std::move(data);  // the padding rows stay zero
  }
  for (const auto& [name, info] : file.tensors()) {
    if (std::find(used.begin(), used.end(), name) != used.end()) continue;
    const bool mask = name.size() > 9 && (name.compare(name.size() - 10, 10, ".attn.bias") == 0 ||
                                          name.find(".attn.masked_bias") != std::string::npos);
    if (mask) continue;  // the causal mask buffer some GPT-2 files keep
    if (name == "lm_head.weight") {
      if (file.read_f32(name) != wte)
        throw SafetensorsError(where + "lm_head.weight differs from the embedding: pipelane's head is tied to wte");
      continue;
    }
    throw SafetensorsError(where + "unexpected tensor '" + name + "' (not part of GPT-2)");
  }
  m.tokenizer = tokenizer_of_vocab(cfg.vocab_size);
  m.description = "Hugging Face model " + dir;
  return m;
}

LoadedModel load_model(const std::string& given) {
  std::error_code ec;
  const std::string path = checkpoint_of(given);  // a run directory: its newest checkpoint
  if (!fs::is_directory(path, ec)) throw std::runtime_error(path + ": no such directory (a checkpoint or a Hugging Face model directory)");
  if (fs::exists(fs::path(path) / kManifestName)) return load_checkpoint_model(path);
  if (HfWeights::present(path)) return load_hf_model(path);
  throw std::runtime_error(path + ": neither a checkpoint (manifest.json), a run directory with one in checkpoints/, "
                           "nor a Hugging Face model (model.safetensors)");
}

std::string model_mismatch(const GptConfig& saved, const GptConfig& expected) {
  const auto d = model_difference(saved, expected);
  return d ? d->key + " = " + d->saved + " where [model] " + d->key + " = " + d->expected : "";
}

void copy_model_into(const LoadedModel& model, const ParamLayout& layout, float* params) {
  for (const ParamEntry& e : layout.entries()) {
    const ParamEntry* src = model.layout->find(e.name);
    if (!src) throw std::runtime_error(model.description + ": no tensor " + e.name);
    const float* full = model.params.data() + src->offset;
    std::vector<float> adapted;
    if (src->full_shape != e.full_shape) {  // wte padded for another tp
      adapted.assign(e.full_numel(), 0.f);
      const std::size_t rows = static_cast<std::size_t>(std::min(src->full_shape[0], e.full_shape[0]));
      std::copy(full, full + rows * static_cast<std::size_t>(e.full_shape[1]), adapted.begin());
      full = adapted.data();
    }
    slice_from_full(e, full, params + e.offset);
  }
}

LoadedModel random_model(const GptConfig& cfg, std::uint64_t seed) {
  const std::string problem = cfg.problem();
  if (!problem.empty()) throw std::runtime_error(problem);
  LoadedModel m = empty_model(cfg);
  GptStage::init_parameters(*m.layout, m.params.data(), seed);
  m.description = "randomly initialised model (seed " + std::to_string(seed) + ")";
  return m;
}

}  // namespace pipelane
