// Llama-family models in and out of Hugging Face directories (hf_llama.h has the layouts):
// loading a LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM directory (config.json +
// model.safetensors or a sharded model.safetensors.index.json) as a whole model, and exporting a
// checkpoint as one. Exporting what was imported writes the same bytes (model.safetensors; the
// config.json differs only in its "pipelane" provenance).
#pragma once
#include "trainer/hf/layer.h"  // trainer/README.md: the layers
#include <string>

#include <nlohmann/json.hpp>

#include "trainer/hf/model_source.h"

namespace pipelane {

// Every tensor checked against the shape config.json implies (a mismatch is one line naming the
// tensor), tensors the model does not have refused, an lm_head.weight beside
// tie_word_embeddings = true accepted only when it equals the embedding.
LoadedModel load_hf_llama_model(const std::string& dir, const nlohmann::json& config,
                                const std::string& config_path);

// A checkpoint (any pp x tp) of an arch = llama model -> DIR/model.safetensors + DIR/config.json.
// Returns the config.json written.
nlohmann::json export_hf_llama(const std::string& checkpoint_dir, const std::string& output);

}  // namespace pipelane
