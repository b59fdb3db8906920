// Hugging Face's Llama-family layouts next to pipelane's: LlamaForCausalLM, and Mistral's and
// Qwen2's (the same tensor names; Qwen2 adds q/k/v biases, Mistral a sliding window pipelane
// refuses). pipelane's Llama-family names are Hugging Face's, and its RoPE is Hugging Face's
// rotate-half, so q_proj/k_proj rows are copied as they are: no permutation on import or export
// (Meta's original checkpoints pair channels (2i, 2i+1) instead; Hugging Face's conversion
// script permutes their rows, and tests/golden/make_llama_golden.py checks against a Meta-style
// model through that permutation). The embedding and an untied lm_head have vocab_size rows in
// the files and padded_vocab rows in pipelane (padding rows zero).
#pragma once
#include "trainer/hf/layer.h"  // trainer/README.md: the layers
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/gpt_config.h"

namespace pipelane {

// Whether config.json describes a model of the Llama family (model_type llama, mistral or qwen2).
bool is_hf_llama_family(const nlohmann::json& config);

// The model of a Llama/Mistral/Qwen2 config.json. std::runtime_error naming `where` and the key
// when it is not a model pipelane can run (another activation, RoPE scaling other than llama3, a
// sliding window, head_dim other than hidden_size / num_attention_heads, biases on o_proj but not
// the MLP, ...).
GptConfig llama_config_from_hf(const nlohmann::json& config, const std::string& where);

// config.json for `cfg` (arch = llama): Qwen2ForCausalLM when bias = qkv, else LlamaForCausalLM
// (attention_bias and mlp_bias for bias = all). `provenance` goes under "pipelane". Throws
// std::runtime_error for a config no such class describes (learned positions, layernorm, GeLU).
nlohmann::json hf_llama_config(const GptConfig& cfg, const nlohmann::json& provenance);

// The tensors of the whole model in LlamaForCausalLM's order (lm_head.weight only when untied).
std::vector<std::string> hf_llama_tensor_names(const GptConfig& cfg);

}  // namespace pipelane
