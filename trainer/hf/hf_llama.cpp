#include "trainer/hf/hf_llama.h"

#include <charconv>
#include <cmath>
#include <stdexcept>

#include "model/gpt_layout.h"

namespace pipelane {

bool is_hf_llama_family(const nlohmann::json& c) {
  if (!c.is_object() || !c.contains("model_type") || !c["model_type"].is_string()) return false;
  const std::string t = c["model_type"];
  return t == "llama" || t == "mistral" || t == "qwen2";
}

namespace {

struct Reader {
  const nlohmann::json& c;
  std::string where;
  [[noreturn]] void fail(const std::string& why) const { throw std::runtime_error(where + ": " + why); }
  int size(const char* key, bool required, int fallback = 0) const {
    if (!c.contains(key) || c[key].is_null()) {
      if (required) fail(std::string("no ") + key);
      return fallback;
    }
    if (!c[key].is_number_integer() || c[key].get<long long>() < 1 || c[key].get<long long>() > (1 << 30))
      fail(std::string(key) + " = " + c[key].dump() + ": expected a positive integer");
    return c[key].get<int>();
  }
  double number(const nlohmann::json& j, const char* key, double fallback) const {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_number() || !std::isfinite(j[key].get<double>()) || j[key].get<double>() <= 0)
      fail(std::string(key) + " = " + j[key].dump() + ": expected a positive number");
    return j[key].get<double>();
  }
  bool flag(const char* key, bool fallback) const {
    if (!c.contains(key) || c[key].is_null()) return fallback;
    if (!c[key].is_boolean()) fail(std::string(key) + " = " + c[key].dump() + ": expected true or false");
    return c[key].get<bool>();
  }
};

void read_rope_scaling(const Reader& r, GptConfig& g) {
  if (!r.c.contains("rope_scaling") || r.c["rope_scaling"].is_null()) return;
  const nlohmann::json& s = r.c["rope_scaling"];
  if (!s.is_object()) r.fail("rope_scaling = " + s.dump() + ": expected an object or null");
  const std::string type = s.value("rope_type", s.value("type", std::string()));
  if (type != "llama3")
    r.fail("rope_scaling.rope_type = " + nlohmann::json(type).dump() + ": pipelane has Llama 3.1's llama3 scaling only");
  g.rope_scaling.factor = r.number(s, "factor", 0);
  g.rope_scaling.low_freq_factor = r.number(s, "low_freq_factor", 1);
  g.rope_scaling.high_freq_factor = r.number(s, "high_freq_factor", 4);
  const double original = r.number(s, "original_max_position_embeddings", 8192);
  if (original != std::floor(original) || original > (1 << 30))
    r.fail("rope_scaling.original_max_position_embeddings = " + s["original_max_position_embeddings"].dump() +
           ": expected a positive integer");
  g.rope_scaling.original_context = static_cast<int>(original);
}

BiasKind read_bias(const Reader& r, const std::string& type) {
  if (type == "qwen2") return BiasKind::Qkv;  // Qwen2's attention: q, k, v with biases, o without
  const bool attention = r.flag("attention_bias", false), mlp = r.flag("mlp_bias", false);
  if (attention != mlp)
    r.fail(std::string("attention_bias = ") + (attention ? "true" : "false") + " with mlp_bias = " +
           (mlp ? "true" : "false") + ": pipelane's biases are on every linear layer (bias = all) or on none");
  return attention ? BiasKind::All : BiasKind::None;
}

// A float as its shortest decimal read back as a double: 1e-5f is written 1e-05.
double float_as_written(float f) {
  char text[32];
  const auto end = std::to_chars(text, text + sizeof text, f).ptr;
  double d = 0;
  std::from_chars(text, end, d);
  return d;
}

}  // namespace

GptConfig llama_config_from_hf(const nlohmann::json& c, const std::string& where) {
  const Reader r{c, where};
  if (!is_hf_llama_family(c)) r.fail("model_type is not llama, mistral or qwen2");
  const std::string type = c["model_type"];
  GptConfig g;
  g.apply_arch_defaults(ModelArch::Llama);
  g.layers = r.size("num_hidden_layers", true);
  g.d_model = r.size("hidden_size", true);
  g.heads = r.size("num_attention_heads", true);
  g.kv_heads = r.size("num_key_value_heads", false, g.heads);
  g.max_seq_len = r.size("max_position_embeddings", true);
  g.vocab_size = r.size("vocab_size", true);
  g.ffn_hidden = r.size("intermediate_size", true);
  if (const int head_dim = r.size("head_dim", false); head_dim != 0 && head_dim * g.heads != g.d_model)
    r.fail("head_dim = " + std::to_string(head_dim) + ": pipelane's head size is hidden_size / num_attention_heads = " +
           std::to_string(g.d_model / g.heads));
  const std::string act = c.value("hidden_act", std::string("silu"));
  if (act != "silu") r.fail("hidden_act = " + act + ": pipelane's SwiGLU uses silu");
  g.norm_eps = static_cast<float>(r.number(c, "rms_norm_eps", 1e-6));
  g.rope_theta = r.number(c, "rope_theta", 10000);
  read_rope_scaling(r, g);
  g.tie_embeddings = r.flag("tie_word_embeddings", false);
  g.bias = read_bias(r, type);
  if (c.contains("sliding_window") && !c["sliding_window"].is_null() && r.flag("use_sliding_window", true) &&
      !(c["sliding_window"].is_number() && c["sliding_window"].get<double>() >= g.max_seq_len))
    r.fail("sliding_window = " + c["sliding_window"].dump() + ": pipelane's attention is full causal attention");
  if (const std::string p = g.problem(); !p.empty()) r.fail(p);
  return g;
}

nlohmann::json hf_llama_config(const GptConfig& g, const nlohmann::json& provenance) {
  if (g.arch != ModelArch::Llama || g.norm != NormKind::RmsNorm || g.position != PositionKind::Rope ||
      g.mlp != MlpKind::SwiGlu)
    throw std::runtime_error(std::string("a Hugging Face Llama/Qwen2 model has rmsnorm, rope and swiglu; this one has ") +
                             norm_name(g.norm) + ", " + position_name(g.position) + ", " + mlp_name(g.mlp));
  const bool qwen2 = g.bias == BiasKind::Qkv;
  const int V = g.vocab_size;
  nlohmann::json scaling = nullptr;
  if (g.rope_scaling.enabled())
    scaling = {{"rope_type", "llama3"},
               {"factor", g.rope_scaling.factor},
               {"low_freq_factor", g.rope_scaling.low_freq_factor},
               {"high_freq_factor", g.rope_scaling.high_freq_factor},
               {"original_max_position_embeddings", g.rope_scaling.original_context}};
  nlohmann::json c = {
      {"architectures", {qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}},
      {"model_type", qwen2 ? "qwen2" : "llama"},
      {"vocab_size", V},
      {"hidden_size", g.d_model},
      {"intermediate_size", g.mlp_hidden()},
      {"num_hidden_layers", g.layers},
      {"num_attention_heads", g.heads},
      {"num_key_value_heads", g.n_kv_heads()},
      {"head_dim", g.head_size()},
      {"max_position_embeddings", g.max_seq_len},
      {"hidden_act", "silu"},
      {"rms_norm_eps", float_as_written(g.norm_eps)},
      {"rope_theta", g.rope_theta},
      {"rope_scaling", scaling},
      {"tie_word_embeddings", g.tie_embeddings},
      {"initializer_range", 0.02},
      {"attention_dropout", 0.0},
      {"bos_token_id", V - 1},
      {"eos_token_id", V - 1},
      {"torch_dtype", "float32"},
      {"pipelane", provenance},
  };
  if (!qwen2) {
    c["attention_bias"] = g.bias == BiasKind::All;
    c["mlp_bias"] = g.bias == BiasKind::All;
  } else {
    c["use_sliding_window"] = false;
    c["sliding_window"] = nullptr;
  }
  return c;
}

std::vector<std::string> hf_llama_tensor_names(const GptConfig& cfg) {
  const ParamLayout layout(cfg, StageRange::whole(cfg));
  std::vector<std::string> names;
  for (const ParamEntry& e : layout.entries()) names.push_back(e.name);
  return names;
}

}  // namespace pipelane
