// Which lanes a stage runs and where their code runs: LaneSpec (a lane and its [lane.NAME]
// options), make_lane_specs (the lanes by name from the registry, each in a worker process or
// in-process per [lanes] isolation) and parse_isolation_mode (that key's text).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lanes/lane.h"
#include "lanes/lane_registry.h"

namespace pipelane {

// How make_lane_specs places lanes ([lanes] isolation).
struct LaneIsolationOptions {
  // Auto: plugins and the command lane in worker processes, the other built-ins in-process.
  enum class Mode { Auto, Thread, Process };
  Mode mode = Mode::Thread;
  // argv that starts a lane worker (lanes/isolation/lane_worker.h), e.g. {"/path/pipelane",
  // "lane-worker"}; required unless mode is Thread.
  std::vector<std::string> worker_command;
  int worker_threads = 1;  // OpenMP/BLAS threads of a worker (the rank's own count)
  int worker_max_processes = 256;  // a worker's tasks (pids cgroup)
  std::string worker_cpus;  // the cores a worker may run on (the rank's own, a cpuset list); "": any
  std::string hidden_dir;  // hidden from workers (the run directory; lanes/isolation/lane_sandbox.h)
  std::vector<std::string> network_lanes;  // lanes whose worker keeps the host's network
  std::string bwrap = "/usr/bin/bwrap";   // the sandbox program; "": none
};

// "auto", "thread", "process"; LaneError otherwise.
LaneIsolationOptions::Mode parse_isolation_mode(const std::string& text);

// One lane to run, with its [lane.NAME] options (validated by the lane in setup()).
struct LaneSpec {
  std::unique_ptr<Lane> lane;
  LaneOptions options;
};

// Creates the named lanes from the registry, each with its [lane.NAME] section (missing: empty).
// LaneError for an unknown name.
// Each lane is placed per `isolation`: a ProcessLane, or the lane itself (which the scheduler runs
// in a ThreadLane).
std::vector<LaneSpec> make_lane_specs(const LaneRegistry& registry, const std::vector<std::string>& names,
                                      const std::map<std::string, std::map<std::string, std::string>>& sections,
                                      const std::string& source, const LaneIsolationOptions& isolation = {});

}  // namespace pipelane
