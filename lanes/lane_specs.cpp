#include "lanes/lane_specs.h"

#include <algorithm>

#include "lanes/isolation/process_lane.h"

namespace pipelane {

LaneIsolationOptions::Mode parse_isolation_mode(const std::string& text) {
  if (text == "auto") return LaneIsolationOptions::Mode::Auto;
  if (text == "thread") return LaneIsolationOptions::Mode::Thread;
  if (text == "process") return LaneIsolationOptions::Mode::Process;
  throw LaneError("[lanes] isolation = '" + text + "': expected auto, thread or process");
}

std::vector<LaneSpec> make_lane_specs(const LaneRegistry& registry, const std::vector<std::string>& names,
                                      const std::map<std::string, std::map<std::string, std::string>>& sections,
                                      const std::string& source, const LaneIsolationOptions& isolation) {
  using Mode = LaneIsolationOptions::Mode;
  std::vector<LaneSpec> specs;
  for (const std::string& name : names) {
    const auto section = sections.find(name);
    const LaneRegistry::WorkerPlugin* worker_plugin = registry.worker_plugin(name);
    const std::string plugin = registry.plugin_path(name);
    // Untrusted code (a plugin, an arbitrary command) gets a worker unless told otherwise; a plugin
    // that was only described by a worker has no other place to run.
    const bool in_worker = worker_plugin || isolation.mode == Mode::Process ||
                           (isolation.mode == Mode::Auto && (!plugin.empty() || name == "command"));
    std::unique_ptr<Lane> lane;
    if (in_worker) {
      LaneWorkerLaunch launch;
      launch.command = isolation.worker_command;
      launch.plugin_path = plugin;
      launch.threads = isolation.worker_threads;
      launch.cpus = isolation.worker_cpus;
      launch.pids_max = isolation.worker_max_processes;
      launch.allow_child_processes = plugin.empty();  // a built-in's processes are its work (command)
      launch.hidden_dir = isolation.hidden_dir;
      launch.bwrap = isolation.bwrap;
      launch.network = std::find(isolation.network_lanes.begin(), isolation.network_lanes.end(), name) !=
                       isolation.network_lanes.end();
      std::string work_unit;
      if (worker_plugin) {
        work_unit = worker_plugin->work_unit;
      } else {
        work_unit = registry.create(name)->work_unit();
      }
      lane = std::make_unique<ProcessLane>(name, work_unit, std::move(launch));
    } else {
      lane = registry.create(name);
    }
    specs.push_back({std::move(lane),
                     LaneOptions(name, section == sections.end() ? std::map<std::string, std::string>{} : section->second,
                                 source)});
  }
  return specs;
}

}  // namespace pipelane
