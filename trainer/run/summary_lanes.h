// summary.json's "lanes" entry as typed data, in the two shapes it has (trainer/run/run_summary.h
// holds one or the other, or neither when lanes were off):
//   a training run's: the job's lanes combined over every rank and valued ("total"), the same for
//     each pipeline stage ("per_stage") and each rank's own summary ("per_rank", null where lanes
//     were off), from lanes/lane_summary.h and trainer/run/lane_valuation.h;
//   a simulation's: the same names where they mean the same, but the simulator's own numbers
//     (steps as a mean over ranks, each lane's step-time source, dollar prices, the requests a
//     service lane served), and quarantine per stage rather than per rank.
#pragma once
#include "trainer/run/layer.h"  // trainer/README.md: the layers
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lanes/lane_summary.h"
#include "trainer/run/lane_valuation.h"

namespace pipelane {

// One pipeline stage's lanes (over its ranks), each lane valued: "lanes.per_stage[]".
struct ValuedStageLanes {
  CombinedLaneSummary lanes;
  std::map<std::string, LaneValue> values;
};

struct TrainingLanes {
  CombinedLaneSummary total;
  LanesValuation valuation;                               // total's lanes, the overhead, the saving
  std::vector<ValuedStageLanes> per_stage;                // index = stage
  std::vector<std::optional<StageLaneSummary>> per_rank;  // index = world rank
};

// One lane in a simulation, summed over the stages (and their ranks) of the entry it is in.
struct SimulatedLane {
  std::string work_unit;
  double units = 0, lane_s = 0, harvested_s = 0, overrun_s = 0;
  double steps = 0;  // a mean step count times the ranks: not a whole number in general
  double units_per_lane_s = 0, units_per_train_s = 0;
  double dedicated_units_per_s = 0, value_device_s = 0;
  double step_ms_median = 0;  // of the lane's step-time model
  std::string source;         // where that model comes from
  // The interference model's (parallel/sim/lane_sim.h, kernel_block_s); written only when set, so
  // lanes without it report as before.
  double kernel_block_ms = 0, interference_s = 0;
  std::string kernel_block_source;
};

struct SimulatedQuarantine {
  std::string lane;
  int stage = 0;
  std::string reason;
};

// "lanes.total" and each "lanes.per_stage[]" entry of a simulation.
struct SimulatedLaneTotals {
  double bubble_s = 0, harvested_s = 0, harvest_fraction = 0, overrun_s = 0;
  double bubble_after_profiling_s = 0, harvested_after_profiling_s = 0, harvest_fraction_after_profiling = 0;
  std::map<std::string, SimulatedLane> lanes;
  std::vector<SimulatedQuarantine> quarantined;
  // The CPU interference model's (parallel/sim/lane_sim.h, lane_gap_delay_s), written as
  // "interference" only when its source is known, so summaries without it read as before.
  double lane_gap_delay_ms = 0, lane_gap_delay_s = 0;
  long lane_gaps = 0;
  std::string lane_gap_delay_source;
};

struct SimulatedStageLanes {
  SimulatedLaneTotals totals;
  std::vector<std::string> lanes_running;  // the lanes this stage has the memory for, in setup order
};

// Against the same simulation with lanes off (so always known, unlike a training run's).
struct SimulatedOverhead {
  std::string baseline;
  double baseline_train_s = 0, train_s = 0, fraction = 0;
  double baseline_step_ms_median = 0, step_ms_median = 0, step_median_fraction = 0;
};

struct DedicatedPrice {
  std::string dedicated_device;
  double price_per_hour = 0, value_usd = 0;
};

struct SimulatedCostSaving {
  std::string dedicated;
  double value_device_s = 0, training_device_s = 0, extra_device_s = 0;
  double fraction = 0, gross_fraction = 0, net_fraction = 0;
  bool gross = false;
  double training_price_per_hour = 0, training_usd = 0, extra_usd = 0, value_usd = 0;
  std::map<std::string, DedicatedPrice> dedicated_prices;  // lane -> its dedicated device's price
};

// Service lanes (prefill in bubbles): time to first token of the requests one replica served.
struct SimulatedRequests {
  std::uint64_t served = 0;
  std::int64_t unserved = 0;
  double ttft_p50_s = 0, ttft_p99_s = 0;
  std::string per;
};

struct SimulatedLanes {
  SimulatedLaneTotals total;
  SimulatedOverhead overhead;
  SimulatedCostSaving cost_saving;
  std::vector<SimulatedStageLanes> per_stage;  // index = stage
  std::optional<SimulatedRequests> requests;   // only with a service lane
};

}  // namespace pipelane
