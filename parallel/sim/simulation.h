// One simulated job from start to end: its shape and memory, its cost model (a profile or the
// device table), the iterations with lanes off and, when there are lanes, with lanes on, and what
// the lanes were worth (FreeRide's pricing: lane work valued at the price of the device it would
// otherwise need, against the training devices' price; gross, and net of the extra training time).
#pragma once
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "parallel/sim/job_sim.h"
#include "parallel/wan_schedule.h"

namespace pipelane::sim {

struct SimulationSetup {
  JobSpec job;
  Cluster cluster;
  std::optional<MeasuredProfile> profile;  // compute costs from it; otherwise from the device table
  std::vector<LaneModel> lanes;            // none: lanes off
  std::vector<int> lane_stages;            // stages lanes may run on; empty: all
  LaneSimSettings lane_settings;
  AllReduceAlgorithm all_reduce = AllReduceAlgorithm::Auto;
  int iterations = 6;
  int keep_timelines = 0;  // iterations whose timelines are kept (for a trace)
  // SimCostModel::wake_s as equally likely values (a profile's, on the machine it was measured
  // on); empty: 0.
  std::vector<double> wake_samples;
  std::uint64_t seed = 1;  // draws of measured spreads
  // Transfers across sites as the executor makes them (parallel/wan_schedule.h): the lists are
  // lowered, cross-site messages striped over wan->connections (also what the inter-site links
  // give data-parallel all-reduces across sites) and shared between pipelines as it says. None:
  // the links as the cluster file gives them, every transfer alone on its link.
  std::optional<WanSettings> wan;
  bool force_sites = false;  // run a tensor-parallel group across sites (otherwise refused)
};

struct LaneValue {
  double units = 0;           // every rank's
  double value_device_s = 0;  // dedicated device-seconds the same work takes
  double value_usd = 0;
  double price_per_hour = 0;  // of that dedicated device
};

struct SimulationOutcome {
  SitePlacement placement;  // where the grid lands on the cluster's sites
  JobShape shape;
  std::vector<double> stage_memory_bytes;
  OpTable ops;
  bool profile_as_measured = false;  // the profile's medians used as they are (same shape)
  bool replicas_identical = true;
  std::vector<std::vector<bool>> runs_on;  // [stage][lane]
  JobSimReport off;                        // lanes off
  std::optional<JobSimReport> on;          // lanes on
  std::unique_ptr<LaneSimulator> lanes;    // the lanes-on run's records
  // Money, with lanes: training devices' cost with lanes off, its extra with lanes on, the work's value.
  double training_price_per_hour = 0;
  std::vector<LaneValue> values;
  double training_usd = 0, extra_usd = 0, value_usd = 0;
  double overhead = 0;           // (T_on - T_off) / T_off
  double gross_saving = 0;       // value / training cost
  double net_saving = 0;         // (value - extra) / training cost
  double tokens_per_s = 0;       // lanes off (the training throughput)
  double tokens_per_s_lanes = 0;
};

// The job does not fit the device: what() names the stage, its bytes and the device's.
class DoesNotFit : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Throws DoesNotFit, or std::invalid_argument (one line) for a job the cluster cannot hold.
SimulationOutcome run_simulation(const SimulationSetup& setup);

// The lists simulate_job replays: build_schedule's, lowered for the WAN (pipeline 0's) when
// setup.wan is set; `placement` from job_placement.
std::vector<std::vector<Instr>> simulated_lists(const SimulationSetup& setup, const SitePlacement& placement);

// The cluster with the WAN settings' connections on its inter-site links.
Cluster cluster_for_wan(const SimulationSetup& setup);

// The stage memory check alone: each stage's training memory by the memory model
// (sim/job_memory.h) in the layout pipelane stores at the device's precision; DoesNotFit when a stage exceeds the device's.
std::vector<double> check_memory(const JobSpec& job, const Cluster& cluster);

}  // namespace pipelane::sim
