// What a plugin says it is, asked in a throwaway lane worker: with isolation = process the plugin's
// code (its static constructors included) never runs in the trainer, not even to read its name.
#pragma once
#include <string>
#include <vector>

namespace pipelane {

struct PluginDescription {
  std::string name;
  std::string work_unit;
};

// Starts `worker_command` --describe PATH (in bubblewrap's namespaces, as lanes run: lanes/isolation/
// lane_sandbox.h; without them where the machine refuses them); LaneError with the loader's own message (no such file,
// not a plugin, another ABI, ...) or naming how the worker ended (a crash while loading, no answer
// within deadline_s).
PluginDescription describe_plugin_in_worker(const std::string& path, const std::vector<std::string>& worker_command,
                                            double deadline_s = 30);

}  // namespace pipelane
