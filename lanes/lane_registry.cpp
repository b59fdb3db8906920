#include "lanes/lane_registry.h"

#include <dlfcn.h>

#include <filesystem>

#include "lanes/pipelane_lane.h"
#include "lanes/plugin_lane.h"

namespace pipelane {

void LaneRegistry::add(std::string name, LaneFactory factory) {
  if (name.empty()) throw LaneError("a lane needs a name");
  if (!factory) throw LaneError("lane '" + name + "': empty factory");
  if (factories_.count(name)) throw LaneError("lane '" + name + "' is already registered");
  factories_.emplace(std::move(name), std::move(factory));
}

std::vector<std::string> LaneRegistry::names() const {
  std::vector<std::string> result;
  for (const auto& [name, factory] : factories_) result.push_back(name);
  return result;
}

std::unique_ptr<Lane> LaneRegistry::create(const std::string& name) const {
  const auto it = factories_.find(name);
  if (it == factories_.end()) {
    std::string known;
    for (const auto& [known_name, factory] : factories_) known += (known.empty() ? "" : ", ") + known_name;
    throw LaneError("unknown lane '" + name + "' (" +
                    (known.empty() ? std::string("no lanes are registered") : "known lanes: " + known) + ")");
  }
  std::unique_ptr<Lane> lane = it->second();
  if (!lane) throw LaneError("lane '" + name + "': its factory returned nothing");
  return lane;
}

void LaneRegistry::load_plugin(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw LaneError(path + ": no such lane plugin file");
  // dlopen searches the library path for a name without '/'; a plugin is always a file path.
  const std::string open_path = path.find('/') == std::string::npos ? "./" + path : path;
  void* raw = ::dlopen(open_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!raw) {
    const char* why = ::dlerror();
    throw LaneError(path + ": cannot load lane plugin: " + (why ? why : "unknown dlopen error"));
  }
  std::shared_ptr<void> library(raw, [](void* handle) { ::dlclose(handle); });
  ::dlerror();
  void* symbol = ::dlsym(raw, PIPELANE_LANE_PLUGIN_SYMBOL);
  if (!symbol)
    throw LaneError(path + ": no symbol " PIPELANE_LANE_PLUGIN_SYMBOL " \u2014 not a pipelane lane plugin");
  const auto entry = reinterpret_cast<pipelane_lane_plugin_fn>(symbol);
  const PluginDescription plugin = read_plugin_description(entry(), path);
  const std::string name = plugin.fields.name;
  if (factories_.count(name))
    throw LaneError(path + ": lane '" + name + "' is already registered (a built-in or another plugin)");
  add(name, [plugin, library, path]() -> std::unique_ptr<Lane> {
    return std::make_unique<PluginLane>(plugin, library, path);
  });
  plugin_paths_[name] = std::filesystem::absolute(path).string();
}

void LaneRegistry::add_worker_plugin(const std::string& name, WorkerPlugin plugin) {
  if (factories_.count(name))
    throw LaneError(plugin.path + ": lane '" + name + "' is already registered (a built-in or another plugin)");
  const std::string path = std::filesystem::absolute(plugin.path).string();
  add(name, [name, path]() -> std::unique_ptr<Lane> {
    throw LaneError("lane '" + name + "' (" + path + ") runs only in a lane worker ([lanes] isolation)");
  });
  plugin.path = path;
  plugin_paths_[name] = path;
  worker_plugins_[name] = std::move(plugin);
}

const LaneRegistry::WorkerPlugin* LaneRegistry::worker_plugin(const std::string& name) const {
  const auto it = worker_plugins_.find(name);
  return it == worker_plugins_.end() ? nullptr : &it->second;
}

std::string LaneRegistry::plugin_path(const std::string& name) const {
  const auto it = plugin_paths_.find(name);
  return it == plugin_paths_.end() ? "" : it->second;
}

LaneRegistry LaneRegistry::with_builtins() {
  LaneRegistry registry;
  for (auto& [name, factory] : builtin_lane_factories()) registry.add(name, factory);
  return registry;
}

}  // namespace pipelane
