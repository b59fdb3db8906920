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
//              is the lane's visible cost to training and is reported per lane.
//   control  - after profiling, about one gap in `control_every` is left empty (control_gaps.h);
//              training's time after the gaps left to the lanes against its time after those gives the cost
//              overrun does not show (interference_estimate.h), in summary().interference.
//   isolate  - every lane runs behind a GuardedLane (lanes/isolation/): in a worker process
//              (ProcessLane) or on a thread of its own (ThreadLane, which wraps any plain Lane
//              handed in). Each call has a deadline (the watchdog): past it the call is ended and
//              the gap goes on. A lane whose setup/step throws, crashes, passes a deadline, goes
//              past its arena or disk quota, or runs away (`runaway_limit` of its last
//              `runaway_window` steps took more than `quarantine_factor` x the predicted cost, a
//              preempted step forgiven) is torn down and quarantined; training carries on.
//   record   - the first `max_records` step and gap records are kept (trace.json); every later one
//              only adds to the totals, so a run of days keeps bounded memory.
//   device   - on a device backend (CUDA), a lane that runs_on_device() gets an arena of pool
//              memory (MemoryKind::DevicePool: the pool's limit is its quota) and its steps are
//              enqueued on its low-priority stream: each gap gets the fixed sequence of its steps
//              frozen when profiling ends (whatever `deterministic` says, so placement is
//              repeatable), posted without polling arrived() in between. The steps run on the
//              lane's own host thread (DeviceLaneThread), so neither training's streams nor
//              training's host thread ever wait for lane work: a step that brings a value back
//              to the host (smalltrain's loss, prefill's logits) waits there. The lane's time is
//              measured by events recorded on its stream around each step, read once the step has
//              returned and they complete (later gaps, end_iteration); waited for only where
//              waiting is harmless: calibration, a checkpoint (save_lanes holds every step posted
//              before it), teardown, summary(). Its cost prediction is that event time. Other
//              lanes (imageproc, pagerank, plugins, workers) keep host arenas and run on the CPU
//              as on the CPU backend.
//
// This class drives the parts from the executor's calls; each part has its own file: which lanes
// run where (lane_specs.h), one lane's context, life and accounting (lane_slot.h), predicting and
// judging a step's cost (lane_step_costs.h), fitting steps into gaps and the frozen plan
// (gap_fitting.h), records, gap lengths and totals (gap_accounting.h), device lanes' posted
// steps (device_lane_queue.h), progress across a restart (lane_progress.h).
//
// Not thread-safe: one GapScheduler per stage, used by that stage's thread (device lanes' host
// threads are its own business).
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

#include "lanes/device_lane_queue.h"
#include "lanes/gap_accounting.h"
#include "lanes/gap_fitting.h"
#include "lanes/gap_scheduler_options.h"
#include "lanes/interference_estimate.h"
#include "lanes/isolation/guarded_lane.h"
#include "lanes/lane.h"
#include "lanes/lane_registry.h"
#include "lanes/lane_slot.h"
#include "lanes/lane_specs.h"
#include "lanes/lane_summary.h"
#include "parallel/gap_filler.h"
#include "runtime/arena.h"
#include "runtime/backend.h"

namespace pipelane {

class GapScheduler : public GapFiller {
 public:
  // Seconds since the origin; default: std::chrono::steady_clock relative to `origin`.
  using Clock = std::function<double()>;
  // Receives one line per event worth telling the user (a quarantine, a lane without a
  // calibration), each starting "lanes: stage S rank R: "; default: stderr.
  using Logger = LaneLogger;

  // Creates each lane's context (an arena of lane_memory_bytes and a low-priority stream of
  // `backend`, its output directory); a lane that is not a GuardedLane runs in a ThreadLane.
  // LaneError when the lanes' quotas together exceed stage_memory_bytes. Nothing of the lanes runs
  // until calibrate().
  GapScheduler(Backend& backend, std::vector<LaneSpec> lanes, GapSchedulerOptions options,
               std::chrono::steady_clock::time_point origin = std::chrono::steady_clock::now(),
               Logger logger = {}, Clock clock = {});
  ~GapScheduler() override;  // teardown(); an abandoned lane's objects are left alive (still in use)
  GapScheduler(const GapScheduler&) = delete;
  GapScheduler& operator=(const GapScheduler&) = delete;

  // Before training's first step: setup() of every lane (if not already done by load_lanes), then
  // `calibration_steps` timed steps each; a failing lane is quarantined. Returns lane -> calibrated
  // step cost in seconds (also in summary()). Until it has run, fill() only measures.
  std::map<std::string, double> calibrate();

  // GapFiller. Returns once arrived() has returned true.
  void fill(int iteration, int gap_id, WaitKind kind, const std::function<bool()>& arrived) override;
  void training_after_gaps(int iteration, const std::vector<TrainingAfterGap>& after) override;
  void end_iteration(int iteration) override;

  // Calls teardown() of every lane that is still active (idempotent). Lanes do not run afterwards.
  void teardown();

  // Progress of every lane that was set up and is not quarantined: lane name -> Lane::save().
  std::map<std::string, std::string> save_lanes();
  // Lane::load() for each lane named in `states` (setting lanes up first if needed); a lane that
  // fails to load is quarantined; states of lanes not running here are ignored (logged).
  void load_lanes(const std::map<std::string, std::string>& states);

  // This stage's accounting (lanes/lane_summary.h): gaps, bubble and harvested seconds, per lane
  // its work (calibration included), time, harvest, overrun, costs, quarantine reason and report,
  // and the frozen plan (deterministic mode).
  StageLaneSummary summary() const;

  // Deterministic mode: gap id -> the lane names run in that gap, in order. Empty until profiling
  // ends. set_plan() installs a plan recorded by an earlier run (summary().plan, e.g. from its
  // summary.json) so a rerun places lane work identically; it is then not recomputed when
  // profiling ends. LaneError when the plan names a lane that does not run here.
  LanePlan plan() const;
  void set_plan(const LanePlan& plan);

  // The first `max_records` of each (calibration steps included).
  const std::vector<LaneStepRecord>& step_records() const { return accounting_.step_records(); }
  const std::vector<GapRecord>& gap_records() const { return accounting_.gap_records(); }
  double predicted_gap_s(int gap_id) const { return accounting_.predicted_gap_s(gap_id); }  // 0: never measured
  double predicted_step_s(const std::string& lane) const;  // 0 when not calibrated
  bool quarantined(const std::string& lane) const;
  std::vector<std::string> lane_names() const;
  double now() const { return clock_(); }
  // True when `lane` runs on the device (device backend and Lane::runs_on_device()).
  bool on_device(const std::string& lane) const;

 private:
  // Runs one step of `slot`, records it, quarantines on failure; returns false if quarantined.
  bool run_step(LaneSlot& slot, int iteration, int gap_id, WaitKind kind, double predicted);
  // fill(), by parts: the frozen plan's steps of this gap, then host steps fitted to what is left
  // of the gap's prediction; `watch` times the arrival.
  class ArrivalWatch;
  void run_planned(int iteration, int gap_id, WaitKind kind, ArrivalWatch& watch);
  void run_fitted(int iteration, int gap_id, WaitKind kind, double predicted_gap, double start_s,
                  ArrivalWatch& watch);
  // calibrate(), by where the lane runs: the durations of its steps, and of those that did work.
  void calibrate_on_device(LaneSlot& slot, std::vector<double>& durations, std::vector<double>& productive);
  void calibrate_on_host(LaneSlot& slot, std::vector<double>& durations, std::vector<double>& productive);
  LaneSlot* find(const std::string& name);
  const LaneSlot* find(const std::string& name) const;

  Backend& backend_;
  bool device_backend_ = false;  // lanes that run_on_device() get pool arenas and event timing
  GapSchedulerOptions options_;
  Logger logger_;
  Clock clock_;
  LaneSlots lanes_;
  std::size_t next_lane_ = 0;  // round-robin cursor
  bool calibrated_ = false;
  bool warned_uncalibrated_ = false;
  bool torn_down_ = false;
  int completed_iterations_ = 0;
  bool plan_frozen_ = false;
  IndexedLanePlan plan_;
  GapAccounting accounting_;
  InterferenceSampler interference_;
  std::vector<LaneStepRecord> recent_;  // steps of the current gap (or calibration step)
  // Declared last: it holds options_ and logger_ by reference, and its steps go before the
  // lanes' host threads (which may still touch them) are joined.
  DeviceLaneQueue device_steps_;
};

}  // namespace pipelane
