// Hugging Face's GPT-2 layout (GPT2LMHeadModel) next to pipelane's, shared by export and import:
// tensor names, which weights are Conv1D (stored [in, out], transposed against pipelane's
// nn.Linear-style [out, in]), the tied head (lm_head.weight is wte, not stored) and the vocabulary
// padding (pipelane's wte has padded_vocab rows; Hugging Face's has vocab_size).
#pragma once
#include "trainer/hf/layer.h"  // trainer/README.md: the layers
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/gpt_config.h"

namespace pipelane {

struct HfGpt2Tensor {
  std::string ours;  // "h.3.attn.c_attn.weight", "wte"
  std::string hf;    // "transformer.h.3.attn.c_attn.weight"
  bool conv1d = false;
};

// Every stored tensor in the order export writes them.
std::vector<HfGpt2Tensor> hf_gpt2_tensors(const GptConfig& cfg);

// [rows, cols] -> [cols, rows].
std::vector<float> transpose(const std::vector<float>& a, std::int64_t rows, std::int64_t cols);

// config.json for `cfg` (tanh GeLU, eps 1e-5, tied head); `provenance` goes under "pipelane".
nlohmann::json hf_gpt2_config(const GptConfig& cfg, const nlohmann::json& provenance);

// The model shape of a GPT-2 config.json. std::runtime_error naming `where` and the key when it
// is not a GPT-2 pipelane can run (untied head, another activation or epsilon, a different MLP
// width, a missing or impossible size).
GptConfig gpt_config_from_hf(const nlohmann::json& config, const std::string& where);

}  // namespace pipelane
