// `pipelane export --checkpoint DIR --format safetensors --output DIR`: a checkpoint saved at any
// (pp, tp) as a Hugging Face GPT-2 model directory (model.safetensors + config.json) that
// GPT2LMHeadModel.from_pretrained loads.
#pragma once
#include "trainer/cli/layer.h"  // trainer/README.md: the layers
#include <string>

#include <nlohmann/json.hpp>

namespace pipelane {

int export_command(int argc, char** argv);

// Writes model.safetensors and config.json under `output` (created). Throws CheckpointError or
// std::runtime_error with one line. Returns config.json's contents.
nlohmann::json export_hf_gpt2(const std::string& checkpoint_dir, const std::string& output);

}  // namespace pipelane
