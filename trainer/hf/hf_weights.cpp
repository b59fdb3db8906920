#include "trainer/hf/hf_weights.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace pipelane {

namespace fs = std::filesystem;

namespace {
constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

bool plain_name(const std::string& s) {
  return !s.empty() && s.find('/') == std::string::npos && s != "." && s != "..";
}
}  // namespace

bool HfWeights::present(const std::string& dir) {
  return fs::exists(fs::path(dir) / kSingle) || fs::exists(fs::path(dir) / kIndex);
}

HfWeights::HfWeights(const std::string& dir) {
  const fs::path single = fs::path(dir) / kSingle, index = fs::path(dir) / kIndex;
  if (fs::exists(single)) {
    files_.push_back(std::make_unique<SafetensorsReader>(single.string()));
    for (const auto& [name, info] : files_[0]->tensors()) where_[name] = files_[0].get();
    description_ = single.string();
    return;
  }
  description_ = index.string();
  if (!fs::exists(index)) throw SafetensorsError(dir + ": no " + kSingle + " and no " + kIndex);
  nlohmann::json j;
  try {
    std::ifstream in(index);
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw SafetensorsError(description_ + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw SafetensorsError(description_ + ": no \"weight_map\" object");
  std::map<std::string, const SafetensorsReader*> by_file;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string() || !plain_name(file.get<std::string>()))
      throw SafetensorsError(description_ + ": tensor '" + name + "' maps to " + file.dump() +
                             ", not a file name in the same directory");
    const std::string f = file.get<std::string>();
    if (!by_file.count(f)) {
      files_.push_back(std::make_unique<SafetensorsReader>((fs::path(dir) / f).string()));
      by_file[f] = files_.back().get();
    }
    if (!by_file[f]->has(name))
      throw SafetensorsError(description_ + ": tensor '" + name + "' is not in " + f + ", where the index puts it");
    where_[name] = by_file[f];
  }
  for (const auto& file : files_)
    for (const auto& [name, info] : file->tensors()) {
      const auto w = where_.find(name);
      if (w != where_.end() && w->second != file.get())
        throw SafetensorsError(description_ + ": tensor '" + name + "' is in " + file->path() + " and " +
                               w->second->path());
    }
}

const SafetensorInfo& HfWeights::info(const std::string& name) const {
  const auto it = where_.find(name);
  if (it == where_.end()) throw SafetensorsError(description_ + ": no tensor '" + name + "'");
  return it->second->tensors().at(name);
}

std::vector<float> HfWeights::read_f32(const std::string& name) const {
  const auto it = where_.find(name);
  if (it == where_.end()) throw SafetensorsError(description_ + ": no tensor '" + name + "'");
  return it->second->read_f32(name);
}

std::vector<std::string> HfWeights::names() const {
  std::vector<std::string> out;
  for (const auto& [name, file] : where_) out.push_back(name);
  return out;
}

}  // namespace pipelane
