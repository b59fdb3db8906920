#include "trainer/hf/hf_gpt2.h"

#include <cmath>
#include <stdexcept>

namespace pipelane {

std::vector<HfGpt2Tensor> hf_gpt2_tensors(const GptConfig& cfg) {
  std::vector<HfGpt2Tensor> out = {{"wte", "transformer.wte.weight"}, {"wpe", "transformer.wpe.weight"}};
  for (int l = 0; l < cfg.layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".", t = "transformer." + h;
    for (const char* name : {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                             "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                             "mlp.c_proj.weight", "mlp.c_proj.bias"}) {
      const std::string n = name;
      // Every matrix of a block is a Conv1D in Hugging Face's GPT-2.
      const bool conv1d = n.size() > 7 && n.compare(n.size() - 7, 7, ".weight") == 0 && n.rfind("ln_", 0) != 0;
      out.push_back({h + n, t + n, conv1d});
    }
  }
  out.push_back({"ln_f.weight", "transformer.ln_f.weight"});
  out.push_back({"ln_f.bias", "transformer.ln_f.bias"});
  return out;
}

std::vector<float> transpose(const std::vector<float>& a, std::int64_t rows, std::int64_t cols) {
  std::vector<float> t(a.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) t[c * rows + r] = a[r * cols + c];
  return t;
}

nlohmann::json hf_gpt2_config(const GptConfig& cfg, const nlohmann::json& provenance) {
  const int V = cfg.vocab_size;
  return {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"vocab_size", V},
      {"n_positions", cfg.max_seq_len},
      {"n_ctx", cfg.max_seq_len},
      {"n_embd", cfg.d_model},
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
      {"pipelane", provenance},
  };
}

GptConfig gpt_config_from_hf(const nlohmann::json& c, const std::string& where) {
  const auto fail = [&](const std::string& why) { throw std::runtime_error(where + ": " + why); };
  if (!c.is_object()) fail("not a JSON object");
  const auto size = [&](std::initializer_list<const char*> keys, bool required) -> int {
    for (const char* k : keys) {
      if (!c.contains(k) || c[k].is_null()) continue;
      if (!c[k].is_number_integer() || c[k].get<long long>() < 1 || c[k].get<long long>() > (1 << 24))
        fail(std::string(k) + " = " + c[k].dump() + ": expected a positive integer");
      return c[k].get<int>();
    }
    if (required) fail(std::string("no ") + *keys.begin());
    return 0;
  };
  if (c.contains("model_type") && c["model_type"] != "gpt2")
    fail("model_type = " + c["model_type"].dump() + ": only gpt2 is supported");
  GptConfig g;
  g.layers = size({"n_layer"}, true);
  g.d_model = size({"n_embd"}, true);
  g.heads = size({"n_head"}, true);
  g.max_seq_len = size({"n_positions", "n_ctx"}, true);
  g.vocab_size = size({"vocab_size"}, true);
  if (const int inner = size({"n_inner"}, false); inner != 0 && inner != 4 * g.d_model)
    fail("n_inner = " + std::to_string(inner) + ": pipelane's MLP is 4 x n_embd = " + std::to_string(4 * g.d_model));
  const std::string act = c.value("activation_function", std::string("gelu_new"));
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    fail("activation_function = " + act + ": pipelane's GeLU is the tanh approximation (gelu_new)");
  if (c.contains("layer_norm_epsilon") &&
      (!c["layer_norm_epsilon"].is_number() || std::fabs(c["layer_norm_epsilon"].get<double>() - 1e-5) > 1e-12))
    fail("layer_norm_epsilon = " + c["layer_norm_epsilon"].dump() + ": pipelane's layernorm uses 1e-5");
  if (c.value("tie_word_embeddings", true) != true) fail("tie_word_embeddings = false: pipelane's head is tied to wte");
  if (c.value("scale_attn_weights", true) != true) fail("scale_attn_weights = false: pipelane scales by 1/sqrt(head size)");
  if (c.value("scale_attn_by_inverse_layer_idx", false) != false)
    fail("scale_attn_by_inverse_layer_idx = true is not supported");
  const std::string problem = g.problem();
  if (!problem.empty()) fail(problem);
  return g;
}

}  // namespace pipelane
