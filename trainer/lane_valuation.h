// What the lanes' work was worth and what it cost training, as FreeRide reports it
// (see README.md, 'Filling bubbles'):
//   overhead    = (T_with_lanes - T_lanes_off) / T_lanes_off
//   cost saving = (value of the lane work in dedicated device-seconds - extra training
//                  device-seconds) / training device-seconds with lanes off
// The two inputs come from files named in [lanes], read and checked before training starts:
//   baseline  = summary.json of a lanes-off run of the same config (T_lanes_off)
//   dedicated = JSON lines of `pipelane lane-bench NAME --json`: each lane alone on one core
// A device-second is one rank's share of the machine for a second (a rank runs on cores / ranks
// cores; lane-bench on one core, which is that share when there is one core per rank).
#pragma once
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "trainer/train_options.h"

namespace pipelane {

struct BaselineRun {
  std::string path;
  double train_seconds = 0;
  double step_ms_median = 0;
};

class LaneValuation {
 public:
  // ConfigError naming the file (and line) when a file is missing, not what it should be, from a
  // different run shape (steps, grid) or without an enabled lane.
  static LaneValuation load(const TrainOptions& options, int world);

  // Adds "overhead", "cost_saving" and each lane's "units_per_train_s", "dedicated_units_per_s"
  // and "value_device_s" to `lanes_total` (combine_lane_summaries' output). Entries whose input
  // was not given are null, with the [lanes] key that would fill them.
  void annotate(nlohmann::json& lanes_total, double train_seconds, double step_ms_median, int world) const;
  // The per-lane part of annotate() alone (for the per-stage entries). Returns the lanes' value in
  // dedicated device-seconds (0 without [lanes] dedicated).
  double annotate_lanes(nlohmann::json& lanes_summary, double train_seconds) const;

  const std::optional<BaselineRun>& baseline() const { return baseline_; }

 private:
  std::optional<BaselineRun> baseline_;
  std::map<std::string, double> dedicated_;  // lane -> units per second alone on one core
  std::string dedicated_path_;
};

}  // namespace pipelane
