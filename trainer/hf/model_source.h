// A whole model in one process for inference (`eval`, `generate`, `import`, samples during
// training): from a checkpoint saved at any (pp, tp), from a Hugging Face GPT-2 directory
// (model.safetensors + config.json, as `pipelane export` writes it), or freshly initialised.
#pragma once
#include "trainer/hf/layer.h"  // trainer/README.md: the layers
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/gpt_config.h"
#include "model/gpt_layout.h"

namespace pipelane {

struct LoadedModel {
  GptConfig config;
  std::unique_ptr<ParamLayout> layout;  // the whole model at tp = 1
  std::vector<float> params;            // layout->total_floats()
  std::string tokenizer;                // "byte", "gpt2", or "" when the source does not say
  std::string description;              // where it came from, for messages
  int step = 0;                         // the checkpoint's step (0 otherwise)
};

// A checkpoint directory (it has manifest.json) or a Hugging Face directory (model.safetensors):
// which one is told by the files. std::runtime_error (CheckpointError, SafetensorsError) with one
// line naming the path otherwise.
LoadedModel load_model(const std::string& path);
LoadedModel load_checkpoint_model(const std::string& checkpoint_dir);
// GPT-2 names with or without the "transformer." prefix; the causal-mask buffers (attn.bias,
// attn.masked_bias) are skipped; an lm_head.weight must equal wte (the head is tied).
LoadedModel load_hf_model(const std::string& dir);
// Empty when `saved` and `expected` are the same shape, else "d_model = 768 where [model] d_model = 128"
// naming the first key that differs.
std::string model_mismatch(const GptConfig& saved, const GptConfig& expected);
// Fills `params` (laid out by `layout`: any stage, any tp) with the model's tensors by name,
// sliced for the layout's tp rank. The vocabulary padding may differ (padded_vocab_for_tp): the
// real rows are copied, padding rows are zero.
void copy_model_into(const LoadedModel& model, const ParamLayout& layout, float* params);
// GPT-2 initialisation from `seed` (the trainer's), for benchmarks that need a shape, not weights.
LoadedModel random_model(const GptConfig& cfg, std::uint64_t seed);

}  // namespace pipelane
