// The model a checkpoint holds, as the manifest's "model" object: the five sizes, plus the family
// keys (GptConfig::family_settings: arch, norm, rope_*, ...) for any model that is not plain
// GPT-2. A GPT-2 manifest records only the sizes, as it did before the family keys existed, and
// a manifest without them is GPT-2.
#pragma once
#include "trainer/checkpoint/layer.h"  // trainer/README.md: the layers
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "model/gpt_config.h"

namespace pipelane {

nlohmann::json model_to_json(const GptConfig& c);
// Checks every value (integers in range, known names, a valid model); std::out_of_range naming
// the key otherwise.
GptConfig model_from_json(const nlohmann::json& m);
// The first [model] key whose value differs between two models (sizes, then family keys).
struct ModelDifference {
  std::string key, saved, expected;
};
std::optional<ModelDifference> model_difference(const GptConfig& saved, const GptConfig& expected);

}  // namespace pipelane
