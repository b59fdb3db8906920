// Lanes by name: the built-ins plus plugins loaded from shared libraries (lanes/pipelane_lane.h).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lanes/builtin/builtin_lanes.h"
#include "lanes/lane.h"

namespace pipelane {

class LaneRegistry {
 public:
  // Throws LaneError when `name` is already registered or empty.
  void add(std::string name, LaneFactory factory);
  // A fresh lane; LaneError "unknown lane 'x' (known lanes: a, b)" for an unknown name.
  std::unique_ptr<Lane> create(const std::string& name) const;
  bool has(const std::string& name) const { return factories_.count(name) != 0; }
  // The file a plugin lane was loaded from; "" for a built-in (or unknown) name. A lane worker
  // loads the same file to create the lane in its own process.
  std::string plugin_path(const std::string& name) const;

  // A plugin that is never loaded in this process, only in lane workers: registered from its
  // description (lanes/isolation/plugin_probe.h). create() refuses it; worker_plugin() has it.
  struct WorkerPlugin {
    std::string work_unit;
    std::string path;
  };
  void add_worker_plugin(const std::string& name, WorkerPlugin plugin);
  const WorkerPlugin* worker_plugin(const std::string& name) const;  // null for any other lane
  std::vector<std::string> names() const;  // sorted
  // dlopen()s a plugin and registers its lane under the plugin's name. LaneError for a missing or
  // unloadable file, a library without the pipelane_lane_plugin_v1 symbol, an ABI version it does
  // not speak, an incomplete description (read_plugin_description), or a name already taken.
  // The library stays loaded while the registry or any lane created from it exists.
  void load_plugin(const std::string& path);
  static LaneRegistry with_builtins();

 private:
  std::map<std::string, LaneFactory> factories_;
  std::map<std::string, std::string> plugin_paths_;
  std::map<std::string, WorkerPlugin> worker_plugins_;
};

}  // namespace pipelane
