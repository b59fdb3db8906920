// The simulator's input files, read into parallel/sim's typed data (cluster files:
// trainer/config/cluster_file.h):
//   a run directory as a profile (its config.ini, summary.json and, when there, trace.json),
//   lane step-time distributions (JSON lines: `pipelane lane-bench NAME --json`, or stated).
// Every error is one line naming the file (and line) and what was expected.
#pragma once
#include "trainer/sim/layer.h"  // trainer/README.md: the layers
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "parallel/sim/job_costs.h"
#include "parallel/sim/lane_sim.h"
#include "trainer/config/cluster_file.h"
#include "trainer/config/train_options.h"

namespace pipelane {

// A run directory's profile and its resolved configuration (config.ini).
struct RunProfile {
  sim::MeasuredProfile profile;
  TrainOptions options;
  std::vector<sim::LaneModel> lanes;  // step-time distributions of its lanes, from trace.json
  bool had_trace = false;
  // What its control gaps measured of the lanes' interference (summary.json: lanes.total.interference),
  // per gap left to the lanes: the simulator's CPU interference parameter. 0 and an empty source
  // where the run had no estimate; a negative estimate (inside its noise) is taken as 0, and the
  // source says so.
  double lane_gap_delay_s = 0;
  std::string lane_gap_delay_source;
};
RunProfile load_run_profile(const std::string& run_dir);

// Lane models from JSON lines. Each line: "lane", and the step time as "step_ms_median" (plus
// "step_ms_deciles": 11 values from the fastest to the slowest step, when known); optional
// "units_per_step" (else "units"/"steps", else 1), "work_unit", "units_per_s" (the dedicated
// throughput `lane-bench` measured), "dedicated_device" (priced from the cluster's table) or
// "dedicated_price_per_hour", "memory_mb", "requests_per_s" (a service: BubbleTea's prefill),
// "source". Dedicated prices are looked up in `devices`.
std::vector<sim::LaneModel> load_lane_models(const std::string& path, const ClusterFile& cluster);

// The job a training configuration describes, with dp from [parallel] dp (0: the cluster's
// devices / (tp x pp)). SimInputError when the batch does not split into microbatches.
sim::JobSpec job_from_options(const TrainOptions& options, int cluster_devices);

}  // namespace pipelane
