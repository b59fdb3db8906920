// The weights of a Hugging Face model directory: one model.safetensors, or the shards a
// model.safetensors.index.json maps tensor names to ({"weight_map": {NAME: FILE}}, FILE a plain
// name in the same directory). Each tensor is read from its own file on demand.
#pragma once
#include "trainer/hf/layer.h"  // trainer/README.md: the layers
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trainer/hf/safetensors.h"

namespace pipelane {

class HfWeights {
 public:
  // SafetensorsError naming the file when a shard or the index is missing or malformed, or a
  // tensor is in two shards or in none the index names.
  explicit HfWeights(const std::string& dir);
  static bool present(const std::string& dir);  // model.safetensors or its index exists
  bool has(const std::string& name) const { return where_.count(name) != 0; }
  const SafetensorInfo& info(const std::string& name) const;
  std::vector<float> read_f32(const std::string& name) const;
  std::vector<std::string> names() const;
  const std::string& description() const { return description_; }  // the file, or the index

 private:
  std::vector<std::unique_ptr<SafetensorsReader>> files_;
  std::map<std::string, const SafetensorsReader*> where_;
  std::string description_;
};

}  // namespace pipelane
