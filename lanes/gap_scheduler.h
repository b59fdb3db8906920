// GapScheduler: one pipeline stage's lanes and the decisions of what runs in which gap.
//
//   predict  - each gap id (the wait's position in the stage's instruction list) has an EWMA of its
//              measured length: the time from fill() being called until arrived() first returned
//              true. The first `profile_iterations` iterations only measure.
//   fit      - calibrate() times a few steps of every lane before training; afterwards an EWMA of
//              actual steps refines each lane's predicted step cost. In a gap, lanes take turns
//              (round-robin among active, unfinished lanes whose cost fits) while
//              elapsed + predicted_step_cost <= predicted_gap * margin, polling arrived() between
//              steps and stopping as soon as it is true. Deterministic mode freezes, when profiling
//              ends, the sequence of lane steps of every gap id from the predictions and then runs
//              exactly that sequence every iteration, whatever arrived() says.
//   account  - a record per lane step and per gap; overrun (lane work after the transfer arrived)
//              is the lane's cost to training and is reported per lane.
//   isolate  - a lane whose setup/step throws, goes past its arena quota, or takes more than
//              `quarantine_factor` x its predicted cost (and over `quarantine_min_s`) on
//              `quarantine_strikes` (2) steps in a row
//              is torn down and quarantined; training carries on.
//
// Not thread-safe: one GapScheduler per stage, used by that stage's thread.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lanes/lane.h"
#include "lanes/lane_registry.h"
#include "parallel/gap_filler.h"
#include "runtime/arena.h"
#include "runtime/backend.h"

namespace pipelane {

struct GapSchedulerOptions {
  int stage = 0;
  int rank = 0;
  std::uint64_t seed = 0;
  std::size_t lane_memory_bytes = std::size_t{256} << 20;    // arena quota of each lane
  std::size_t stage_memory_bytes = std::size_t{1024} << 20;  // cap on all lanes of this stage
  double margin = 0.9;          // fill at most this share of a predicted gap
  bool deterministic = false;
  int profile_iterations = 2;   // iterations that only measure gaps
  int calibration_steps = 3;    // steps per lane in calibrate(); the median is the first prediction
  double ewma_alpha = 0.3;      // weight of the newest measurement (gap lengths and step costs)
  double quarantine_factor = 10;  // one step above this x its predicted cost quarantines the lane,
  double quarantine_min_s = 0.001;  // if it also took longer than this (a preempted 2 us step is no runaway)
  // Consecutive such steps before the lane is quarantined: one spike can be the machine (page
  // cache writeback, preemption), a lane that keeps doing it is running away.
  int quarantine_strikes = 2;
  std::string output_root;      // lane NAME writes into <output_root>/<NAME>/rank<R>; "" = no dir
};

// One lane to run, with its [lane.NAME] options (validated by the lane in setup()).
struct LaneSpec {
  std::unique_ptr<Lane> lane;
  LaneOptions options;
};

// Creates the named lanes from the registry, each with its [lane.NAME] section (missing: empty).
// LaneError for an unknown name.
std::vector<LaneSpec> make_lane_specs(const LaneRegistry& registry, const std::vector<std::string>& names,
                                      const std::map<std::string, std::map<std::string, std::string>>& sections,
                                      const std::string& source);

struct LaneStepRecord {
  int iteration = 0;   // -1 for calibration steps
  int gap_id = -1;     // -1 for calibration steps
  WaitKind kind = WaitKind::None;
  std::string lane;
  double start_s = 0;  // seconds since the scheduler's clock origin
  double end_s = 0;
  double units = 0;
};

struct GapRecord {
  int iteration = 0;
  int gap_id = 0;
  WaitKind kind = WaitKind::None;
  double start_s = 0;    // fill() called
  double arrived_s = 0;  // see arrived_exact
  double end_s = 0;      // fill() returned
  // True when a poll between lane steps (or while idle) saw the arrival, so arrived_s is that poll.
  // False when the first true poll followed a lane step [s, e]: the arrival happened during that
  // step (the poll before it said no), and without a timestamp from the transport we take the
  // midpoint, arrived_s = (s + e) / 2 (unbiased for an arrival uniform over the step; off by at
  // most half a step). Gap-length EWMA, harvested and overrun seconds use this estimate.
  bool arrived_exact = true;
  int lane_steps = 0;
  bool profiling = false;   // a gap of the profile iterations: measured, never filled
  double harvested_s = 0;   // lane step time inside [start_s, arrived_s]
};

class GapScheduler : public GapFiller {
 public:
  // Seconds since the origin; default: std::chrono::steady_clock relative to `origin`.
  using Clock = std::function<double()>;
  // Receives one line per event worth telling the user (a quarantine, a lane without a
  // calibration); default: stderr.
  using Logger = std::function<void(const std::string&)>;

  // Creates each lane's context (an arena of lane_memory_bytes and a low-priority stream of `backend`,
  // its output directory). LaneError when the lanes' quotas together exceed stage_memory_bytes.
  // Nothing of the lanes runs until calibrate().
  GapScheduler(Backend& backend, std::vector<LaneSpec> lanes, GapSchedulerOptions options,
               std::chrono::steady_clock::time_point origin = std::chrono::steady_clock::now(),
               Logger logger = {}, Clock clock = {});
  ~GapScheduler() override;  // teardown()
  GapScheduler(const GapScheduler&) = delete;
  GapScheduler& operator=(const GapScheduler&) = delete;

  // Before training's first step: setup() of every lane (if not already done by load_lanes), then
  // `calibration_steps` timed steps each; a failing lane is quarantined. Returns lane -> calibrated
  // step cost in seconds (also in summary()). Until it has run, fill() only measures.
  std::map<std::string, double> calibrate();

  // GapFiller. Returns once arrived() has returned true.
  void fill(int iteration, int gap_id, WaitKind kind, const std::function<bool()>& arrived) override;
  void end_iteration(int iteration) override;

  // Calls teardown() of every lane that is still active (idempotent). Lanes do not run afterwards.
  void teardown();

  // Progress of every lane that was set up and is not quarantined: lane name -> Lane::save().
  std::map<std::string, std::string> save_lanes();
  // Lane::load() for each lane named in `states` (setting lanes up first if needed); a lane that
  // fails to load is quarantined; states of lanes not running here are ignored (logged).
  void load_lanes(const std::map<std::string, std::string>& states);

  // Per stage: bubble_s (sum of gap lengths), harvested_s (lane time inside gaps before arrival),
  // harvest_fraction, overrun_s, per-lane units / steps / lane_s / units_per_s / harvested_s /
  // overrun_s / calibrated_step_s / predicted_step_s / quarantine reason / report, quarantined
  // lanes with reasons, the frozen plan (deterministic mode).
  nlohmann::json summary() const;

  // Deterministic mode: gap id -> the lane names run in that gap, in order. Empty until profiling
  // ends. set_plan() installs a plan recorded by an earlier run (e.g. from summary()["plan"]) so a
  // rerun places lane work identically; it is then not recomputed when profiling ends.
  std::map<int, std::vector<std::string>> plan() const;
  void set_plan(const std::map<int, std::vector<std::string>>& plan);

  const std::vector<LaneStepRecord>& step_records() const { return steps_; }
  const std::vector<GapRecord>& gap_records() const { return gaps_; }
  double predicted_gap_s(int gap_id) const;      // 0 when never measured
  double predicted_step_s(const std::string& lane) const;  // 0 when not calibrated
  bool quarantined(const std::string& lane) const;
  std::vector<std::string> lane_names() const;
  double now() const { return clock_(); }

 private:
  struct LaneSlot;

  bool ensure_setup(LaneSlot& slot);
  bool schedulable(const LaneSlot& slot) const;
  // Runs one step of `slot`, records it, quarantines on failure; returns false if quarantined.
  bool run_step(LaneSlot& slot, int iteration, int gap_id, WaitKind kind, double predicted);
  void quarantine(LaneSlot& slot, const std::string& reason);
  void freeze_plan();
  LaneSlot* find(const std::string& name);
  const LaneSlot* find(const std::string& name) const;

  Backend& backend_;
  GapSchedulerOptions options_;
  Logger logger_;
  Clock clock_;
  std::vector<std::unique_ptr<LaneSlot>> lanes_;
  std::size_t next_lane_ = 0;  // round-robin cursor
  bool calibrated_ = false;
  bool warned_uncalibrated_ = false;
  bool torn_down_ = false;
  int completed_iterations_ = 0;
  bool plan_frozen_ = false;
  std::map<int, std::vector<std::size_t>> plan_;  // gap id -> lane indices
  std::map<int, double> gap_ewma_;
  std::vector<LaneStepRecord> steps_;
  std::vector<GapRecord> gaps_;
};

}  // namespace pipelane
