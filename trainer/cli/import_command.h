// `pipelane import --format safetensors --input DIR --output CHECKPOINT`: a Hugging Face GPT-2
// (model.safetensors + config.json, the layout `pipelane export` writes and GPT2LMHeadModel saves)
// as a pipelane checkpoint of one shard at step 0, with zero AdamW moments. Training starts from
// it with `[run] init_from = CHECKPOINT` at any grid (fine-tuning).
#pragma once
#include "trainer/cli/layer.h"  // trainer/README.md: the layers
#include <string>

namespace pipelane {

int import_command(int argc, char** argv);

// Writes the checkpoint directory `output` (which must not hold one already). Throws
// std::runtime_error with one line naming the file and what is wrong. Returns a description.
std::string import_hf_gpt2(const std::string& input_dir, const std::string& output);

}  // namespace pipelane
