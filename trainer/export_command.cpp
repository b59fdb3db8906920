#include "trainer/export_command.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <vector>

#include "trainer/checkpoint.h"

namespace pipelane {

namespace fs = std::filesystem;

namespace {

struct HfTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> data;
};

// [rows, cols] -> [cols, rows]: Hugging Face's GPT-2 uses Conv1D, whose weight is [in, out],
// where pipelane (like nn.Linear) stores [out, in].
std::vector<float> transpose(const std::vector<float>& a, std::int64_t rows, std::int64_t cols) {
  std::vector<float> t(a.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) t[c * rows + r] = a[r * cols + c];
  return t;
}

void write_safetensors(const std::string& path, const std::vector<HfTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}, {"producer", "pipelane export"}};
  std::uint64_t offset = 0;
  for (const HfTensor& t : tensors) {
    const std::uint64_t bytes = t.data.size() * sizeof(float);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');  // the data starts 8-byte aligned
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    const std::uint64_t n = text.size();
    unsigned char le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(n >> (8 * i));
    out.write(reinterpret_cast<const char*>(le), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const HfTensor& t : tensors)  // little-endian float32 (x86/ARM hosts)
      out.write(reinterpret_cast<const char*>(t.data.data()),
                static_cast<std::streamsize>(t.data.size() * sizeof(float)));
    if (!out) throw std::runtime_error(tmp + ": cannot write");
  }
  fs::rename(tmp, path);
}

}  // namespace

nlohmann::json export_hf_gpt2(const std::string& checkpoint_dir, const std::string& output) {
  CheckpointReader reader(checkpoint_dir);
  const GptConfig cfg = reader.model();
  const std::int64_t C = cfg.d_model, V = cfg.vocab_size;
  std::vector<HfTensor> out;
  auto plain = [&](const std::string& ours, const std::string& hf) {
    std::vector<std::int64_t> shape;
    std::vector<float> d = reader.full_tensor("params", ours, &shape);
    out.push_back({hf, shape, std::move(d)});
  };
  auto conv1d = [&](const std::string& ours, const std::string& hf) {
    std::vector<std::int64_t> shape;
    std::vector<float> d = reader.full_tensor("params", ours, &shape);
    out.push_back({hf, {shape[1], shape[0]}, transpose(d, shape[0], shape[1])});
  };
  {
    std::vector<std::int64_t> shape;
    std::vector<float> wte = reader.full_tensor("params", "wte", &shape);
    wte.resize(static_cast<std::size_t>(V * C));  // the padding rows are not tokens
    out.push_back({"transformer.wte.weight", {V, C}, std::move(wte)});
  }
  plain("wpe", "transformer.wpe.weight");
  for (int l = 0; l < cfg.layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    const std::string t = "transformer." + h;
    plain(h + "ln_1.weight", t + "ln_1.weight");
    plain(h + "ln_1.bias", t + "ln_1.bias");
    conv1d(h + "attn.c_attn.weight", t + "attn.c_attn.weight");
    plain(h + "attn.c_attn.bias", t + "attn.c_attn.bias");
    conv1d(h + "attn.c_proj.weight", t + "attn.c_proj.weight");
    plain(h + "attn.c_proj.bias", t + "attn.c_proj.bias");
    plain(h + "ln_2.weight", t + "ln_2.weight");
    plain(h + "ln_2.bias", t + "ln_2.bias");
    conv1d(h + "mlp.c_fc.weight", t + "mlp.c_fc.weight");
    plain(h + "mlp.c_fc.bias", t + "mlp.c_fc.bias");
    conv1d(h + "mlp.c_proj.weight", t + "mlp.c_proj.weight");
    plain(h + "mlp.c_proj.bias", t + "mlp.c_proj.bias");
  }
  plain("ln_f.weight", "transformer.ln_f.weight");
  plain("ln_f.bias", "transformer.ln_f.bias");
  // lm_head.weight is tied to transformer.wte.weight (tie_word_embeddings), so it is not stored,
  // as in Hugging Face's own GPT-2 files.

  std::error_code ec;
  fs::create_directories(output, ec);
  if (ec) throw std::runtime_error(output + ": cannot create (" + ec.message() + ")");
  write_safetensors((fs::path(output) / "model.safetensors").string(), out);
  const nlohmann::json config = {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"vocab_size", V},
      {"n_positions", cfg.max_seq_len},
      {"n_ctx", cfg.max_seq_len},
      {"n_embd", C},
      {"n_layer", cfg.layers},
      {"n_head", cfg.heads},
      {"n_inner", nullptr},
      {"activation_function", "gelu_new"},  // GeLU, tanh approximation
      {"layer_norm_epsilon", 1e-5},
      {"resid_pdrop", 0.0},
      {"embd_pdrop", 0.0},
      {"attn_pdrop", 0.0},
      {"initializer_range", 0.02},
      {"scale_attn_weights", true},
      {"tie_word_embeddings", true},
      {"bos_token_id", V - 1},
      {"eos_token_id", V - 1},
      {"torch_dtype", "float32"},
      {"pipelane", {{"checkpoint", checkpoint_dir}, {"step", reader.step()}}},
  };
  std::ofstream cfg_out(fs::path(output) / "config.json", std::ios::trunc);
  cfg_out << config.dump(2) << '\n';
  if (!cfg_out) throw std::runtime_error(output + "/config.json: cannot write");
  return config;
}

int export_command(int argc, char** argv) {
  std::string checkpoint, format = "safetensors", output;
  const char* usage =
      "usage: pipelane export --checkpoint DIR --format safetensors --output DIR\n\n"
      "Writes a checkpoint (saved at any pp x tp) as a Hugging Face GPT-2 model directory:\n"
      "model.safetensors with GPT2LMHeadModel's tensor names and shapes, and config.json.\n";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], value;
    if (a == "--help" || a == "-h") {
      std::printf("%s", usage);
      return 0;
    }
    const auto eq = a.find('=');
    if (eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      std::fprintf(stderr, "pipelane export: %s needs a value\n%s", a.c_str(), usage);
      return 2;
    }
    if (a == "--checkpoint") checkpoint = value;
    else if (a == "--format") format = value;
    else if (a == "--output") output = value;
    else {
      std::fprintf(stderr, "pipelane export: unknown option %s\n%s", a.c_str(), usage);
      return 2;
    }
  }
  if (checkpoint.empty() || output.empty()) {
    std::fprintf(stderr, "pipelane export: --checkpoint and --output are required\n%s", usage);
    return 2;
  }
  if (format != "safetensors") {
    std::fprintf(stderr, "pipelane export: unknown --format '%s' (supported: safetensors)\n", format.c_str());
    return 2;
  }
  try {
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
