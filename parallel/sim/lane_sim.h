// Lanes in simulated gaps: each lane is a step-time distribution (measured by
// `pipelane lane-bench NAME --json`, taken from a run's trace, or stated, e.g. a paper's median
// step), and each stage's gaps are filled the way lanes/gap_scheduler does it: the first
// `profile_iterations` only measure, each gap id's length is predicted by an EWMA, lanes are
// calibrated by the median of a few steps and refined by an EWMA of their steps, and the next
// step is chosen by the shared fit rule (parallel/gap_fit.h). A lane step that runs past the
// arrival delays the stage: that is the lanes' cost to training, and the simulator sees it
// propagate through the pipeline.
//
// A lane with 3 runaway steps (more than 10x the prediction) among its last 16 is quarantined on
// that stage, the gap scheduler's rule (lanes/gap_scheduler.h: runaway_limit, runaway_window). Not modelled: deterministic (frozen-plan) mode and a lane's
// work running out; side work takes the device alone while it runs (time-sliced, as on the CPU).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "parallel/schedule_sim.h"
#include "parallel/sim/distribution.h"

namespace pipelane::sim {

struct LaneModel {
  std::string name;
  std::string work_unit = "steps";
  // Step time in seconds as equally likely values, ascending (distribution.h); one value is a
  // constant step.
  std::vector<double> step_s;
  // A run's traced steps in the order they ran (optional): replayed in that order, each stage from
  // its own place in it, instead of drawn - so slow steps come in a row as often as they did,
  // which is what quarantines a lane.
  std::vector<double> step_sequence;
  double units_per_step = 1;
  // What its work is worth: units per second on the dedicated device it is valued on (0: the
  // lane's own rate in bubbles, units_per_step / median step - FreeRide's assumption), and that
  // device's price per hour (0: the training device's).
  double dedicated_units_per_s = 0;
  std::string dedicated_device;
  double dedicated_price_per_hour = 0;
  double memory_bytes = 0;  // runs only on stages with this much device memory free
  // A service (prefill as a service): each step serves one request; requests arrive on every
  // stage as a Poisson process of this rate. 0: the lane always has work.
  double requests_per_s = 0;
  std::string source;  // where the distribution comes from (reports)
  // Interference on a shared device (a GPU under MPS, as FreeRide runs its side tasks): a thread
  // block, once on an SM, runs to its end, so when a gap this lane ran in ends, training's next
  // kernel waits for the lane's blocks still resident - half a block on average. Lane kernels are
  // asynchronous to the host that decides the steps, so they are taken to be still on the SMs at
  // every filled gap's end (the upper end). 0: no such delay (a CPU lane: its step holds the core
  // until it returns, and the step time already says so). Not modelled: a lane's memory traffic
  // slowing a concurrent memory-bound training kernel (lane steps never overlap training here).
  double kernel_block_s = 0;
  std::string kernel_block_source;  // measured or assumed, and from what (reports)

  double median_step_s() const;
  double step_at(double u) const;  // a step time for a uniform draw u in [0, 1)
  double value_rate_units_per_s() const;   // dedicated_units_per_s, or the bubble rate
};

struct LaneSimSettings {
  double margin = 0.9;
  int profile_iterations = 2;
  double ewma_alpha = 0.3;     // the gap scheduler's
  int calibration_steps = 3;   // the gap scheduler's
  // The gap scheduler's quarantine of runaway steps (is_runaway_step, gap_fit.h).
  double quarantine_factor = 10;
  double quarantine_min_s = 0.001;
  int runaway_window = 16;  // the gap scheduler's: late steps among the last runaway_window
  int runaway_limit = 3;
  std::uint64_t seed = 1;
  // Interference on a CPU: training's extra compute after every gap left to the lanes after
  // profiling, filled or not (a lane step's working set evicted training's from the caches they
  // share). Measured by a run's control gaps (lanes/interference_estimate.h: its extra_s over its
  // lane gaps, the same definition), so it is applied to the same gaps. 0: none.
  double lane_gap_delay_s = 0;
  std::string lane_gap_delay_source;  // measured in which run, or stated (reports)
};

struct SimLaneStep {
  int iteration, stage, gap, lane;
  WaitKind kind;
  double start_s, end_s, units;  // seconds since the iteration's start
};

struct SimGap {
  int iteration, stage, gap;
  WaitKind kind;
  double start_s, arrived_s, end_s;  // arrived_s: estimated as the gap scheduler does
  bool profiling;
  double harvested_s;
};

struct SimRequest {
  int stage, lane;
  double arrival_s, done_s;  // seconds since the first iteration's start; done_s < 0: not served
};

// Per stage and lane.
struct LaneTotals {
  double units = 0, lane_s = 0, harvested_s = 0, overrun_s = 0;
  double interference_s = 0;  // training's delay from this lane's kernel blocks (kernel_block_s)
  long steps = 0;
  double predicted_step_s = 0, calibrated_step_s = 0;
  std::vector<char> late;  // the last runaway_window steps: late or not (a ring)
  std::size_t late_next = 0;
  int late_count = 0;
  bool quarantined = false;
  int quarantined_at = -1;  // iteration
};

class LaneSimulator final : public SimGapFiller {
 public:
  // runs_on[stage][lane]: whether that lane runs on that stage (stage choice, memory).
  LaneSimulator(std::vector<LaneModel> lanes, std::vector<std::vector<bool>> runs_on, LaneSimSettings settings);

  // Iterations are simulated one after another from time 0 each; `offset_s` is the iteration's
  // start on the job's clock (request arrivals live on that clock).
  void start_iteration(int iteration, double offset_s);
  double fill(int stage, int index, WaitKind kind, double start_s, double ready_s) override;

  const std::vector<LaneModel>& lanes() const { return lanes_; }
  const std::vector<std::vector<bool>>& runs_on() const { return runs_on_; }
  const std::vector<SimLaneStep>& steps() const { return steps_; }
  const std::vector<SimGap>& gaps() const { return gaps_; }
  const std::vector<std::vector<LaneTotals>>& totals() const { return totals_; }  // [stage][lane]
  // Training's delay from lane_gap_delay_s on each stage, and the gaps it was added after.
  const std::vector<double>& lane_gap_delay_s() const { return lane_gap_delay_s_; }
  const std::vector<long>& lane_gaps() const { return lane_gaps_; }
  // Every request that arrived before `until_s` (job clock), served or not.
  std::vector<SimRequest> requests(double until_s);

 private:
  struct StageState {
    std::map<int, double> gap_ewma;
    std::vector<double> predicted;      // per lane
    std::vector<std::size_t> replayed;  // per lane: steps of its sequence taken
    std::size_t cursor = 0;
    UniformDraws rng{0};
    std::vector<std::vector<double>> queue;  // per lane: arrival times waiting (job clock)
    std::vector<double> next_arrival;   // per lane
  };
  double draw(StageState& st);  // uniform in [0, 1)
  double next_step_s(int stage, std::size_t lane);
  void arrivals_until(int stage, double job_s);

  std::vector<LaneModel> lanes_;
  std::vector<std::vector<bool>> runs_on_;
  LaneSimSettings settings_;
  std::vector<StageState> stages_;
  std::vector<std::vector<LaneTotals>> totals_;
  std::vector<double> lane_gap_delay_s_;  // per stage
  std::vector<long> lane_gaps_;           // per stage: gaps left to the lanes after profiling
  std::vector<SimLaneStep> steps_;
  std::vector<SimGap> gaps_;
  std::vector<SimRequest> served_;
  int iteration_ = 0;
  double offset_s_ = 0;
};

}  // namespace pipelane::sim
