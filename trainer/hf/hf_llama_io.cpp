#include "trainer/hf/hf_llama_io.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "trainer/checkpoint/checkpoint.h"
#include "trainer/hf/hf_llama.h"
#include "trainer/hf/hf_weights.h"
#include "trainer/hf/safetensors.h"

namespace pipelane {

namespace fs = std::filesystem;

namespace {

std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string t = "[";
  for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

// The shape a tensor has in a Hugging Face file: pipelane's full shape, vocabulary tables unpadded.
std::vector<std::int64_t> file_shape(const ParamLayout& layout, const ParamEntry& e) {
  std::vector<std::int64_t> s = e.full_shape;
  if (layout.is_vocab_table(e.name)) s[0] = layout.config().vocab_size;
  return s;
}

}  // namespace

LoadedModel load_hf_llama_model(const std::string& dir, const nlohmann::json& config, const std::string& config_path) {
  LoadedModel m;
  m.config = llama_config_from_hf(config, config_path);
  m.layout = std::make_unique<ParamLayout>(m.config, StageRange::whole(m.config));
  m.params.assign(m.layout->total_floats(), 0.f);
  const HfWeights weights(dir);
  const std::string where = weights.description() + ": ";
  std::vector<std::string> used;
  for (const ParamEntry& e : m.layout->entries()) {
    if (!weights.has(e.name))
      throw SafetensorsError(where + "no tensor '" + e.name + "' (" + config.value("model_type", std::string()) +
                             " with num_hidden_layers = " + std::to_string(m.config.layers) + ")");
    const std::vector<std::int64_t> expected = file_shape(*m.layout, e);
    if (weights.info(e.name).shape != expected)
      throw SafetensorsError(where + "tensor '" + e.name + "' has shape " + shape_text(weights.info(e.name).shape) +
                             " but config.json says " + shape_text(expected));
    const std::vector<float> data = weights.read_f32(e.name);
    std::copy(data.begin(), data.end(), m.params.begin() + static_cast<std::ptrdiff_t>(e.offset));
    used.push_back(e.name);
  }
  for (const std::string& name : weights.names()) {
    if (std::find(used.begin(), used.end(), name) != used.end()) continue;
    if (name.find("rotary_emb.inv_freq") != std::string::npos) continue;  // a buffer older files keep
    if (name == ParamLayout::kHeadName && m.config.tie_embeddings) {
      const ParamEntry& embed = *m.layout->find(m.layout->embedding_name());
      const std::vector<float> head = weights.read_f32(name);
      if (!std::equal(head.begin(), head.end(), m.params.begin() + static_cast<std::ptrdiff_t>(embed.offset)))
        throw SafetensorsError(where + "lm_head.weight differs from model.embed_tokens.weight although "
                               "tie_word_embeddings = true");
      continue;
    }
    throw SafetensorsError(where + "unexpected tensor '" + name + "' (not part of this " +
                           config.value("model_type", std::string("llama")) + " model)");
  }
  m.tokenizer = "";  // a Hugging Face model's tokenizer files live beside it; none of pipelane's names
  m.description = "Hugging Face model " + dir;
  return m;
}

nlohmann::json export_hf_llama(const std::string& checkpoint_dir, const std::string& output) {
  CheckpointReader reader(checkpoint_dir);
  const GptConfig cfg = reader.model();
  const nlohmann::json config = hf_llama_config(cfg, {{"checkpoint", checkpoint_dir}, {"step", reader.step()}});
  const ParamLayout layout(cfg, StageRange::whole(cfg));
  std::vector<SafetensorOut> out;
  for (const ParamEntry& e : layout.entries()) {
    std::vector<std::int64_t> shape;
    std::vector<float> d = reader.full_tensor("params", e.name, &shape);
    const std::vector<std::int64_t> want = file_shape(layout, e);
    std::size_t n = 1;
    for (std::int64_t x : want) n *= static_cast<std::size_t>(x);
    d.resize(n);  // the vocabulary's padding rows are not tokens
    out.push_back({e.name, want, std::move(d)});
  }
  std::error_code ec;
  fs::create_directories(output, ec);
  if (ec) throw std::runtime_error(output + ": cannot create (" + ec.message() + ")");
  write_safetensors((fs::path(output) / "model.safetensors").string(), out,
                    {{"format", "pt"}, {"producer", "pipelane export"}});
  std::ofstream cfg_out(fs::path(output) / "config.json", std::ios::trunc);
  cfg_out << config.dump(2) << '\n';
  if (!cfg_out) throw std::runtime_error(output + "/config.json: cannot write");
  return config;
}

}  // namespace pipelane
