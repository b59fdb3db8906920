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

#include "lanes/isolation/guarded_lane.h"
#include "lanes/lane.h"
#include "lanes/lane_registry.h"
#include "lanes/lane_summary.h"
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
  // Runaway: a step is late when it takes more than quarantine_factor x its predicted cost and
  // longer than quarantine_min_s. A lane with runaway_limit late steps among its last
  // runaway_window steps in gaps is quarantined: one spike can be the machine (page cache
  // writeback), a habit is the lane. With lane_timing, a step is judged by its own time where it
  // ran (LaneStepCost: neither the hand-over nor the time it waited on a run queue, which a busy
  // machine adds) against an EWMA of the same; without a run-queue clock, a step the OS preempted
  // while its CPU time stayed within the factor is forgiven. Without lane_timing (tests on an
  // injected clock), by the scheduler's clock and prediction alone.
  double quarantine_factor = 10;
  double quarantine_min_s = 0.001;  // a 2 us step taking 30 us is no runaway
  int runaway_window = 16;
  int runaway_limit = 3;
  bool lane_timing = true;
  // The watchdog: a step in a gap must return within max(step_deadline_factor x its predicted
  // cost, step_deadline_min_s), every other call (setup, calibration steps, save, load, report,
  // teardown) within call_deadline_s. Past it the lane is ended (its worker killed, or its thread
  // abandoned) and quarantined, and the gap goes on. The floor is well above a scheduler time
  // slice: killing must never punish a lane for the machine being busy.
  double step_deadline_factor = 50;
  double step_deadline_min_s = 0.5;
  double call_deadline_s = 60;
  std::uint64_t lane_output_bytes = 0;  // disk quota of each lane's output directory; 0: none
  std::size_t max_records = 20000;      // step and gap records kept (see `record` above)
  // Device lanes: at most this many steps enqueued in one gap (0: as many as the gap's prediction
  // fits), so that one mismeasured gap cannot queue a long stretch of lane work.
  int max_device_steps_per_gap = 0;
  // Device lanes: a lane whose host thread has this many posted steps still to return (it cannot
  // keep up with the gaps it was planned into) gets no new steps until it catches up, so its
  // queue (and memory) stays bounded without training's thread ever waiting; said once per lane.
  // Placement follows the plan exactly as long as a lane keeps up. 0: no bound.
  int max_device_backlog_steps = 1000;
  std::string output_root;      // lane NAME writes into <output_root>/<NAME>/rank<R>; "" = no dir
  // Where this stage's lanes sit in the job (LaneContext's world_size, instance_index/count).
  int world_size = 1;
  int instance_index = 0;
  int instance_count = 1;
};

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
  // Lane steps run in this gap. Device steps are posted: one posted after its lane finished or
  // failed does not run and is taken off once the scheduler sees that (a later gap, teardown).
  int lane_steps = 0;
  bool profiling = false;   // a gap of the profile iterations: measured, never filled
  double harvested_s = 0;   // lane step time inside [start_s, arrived_s]
};

class GapScheduler : public GapFiller {
 public:
  // Seconds since the origin; default: std::chrono::steady_clock relative to `origin`.
  using Clock = std::function<double()>;
  // Receives one line per event worth telling the user (a quarantine, a lane without a
  // calibration), each starting "lanes: stage S rank R: "; default: stderr.
  using Logger = std::function<void(const std::string&)>;

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
  const std::vector<LaneStepRecord>& step_records() const { return steps_; }
  const std::vector<GapRecord>& gap_records() const { return gaps_; }
  double predicted_gap_s(int gap_id) const;      // 0 when never measured
  double predicted_step_s(const std::string& lane) const;  // 0 when not calibrated
  bool quarantined(const std::string& lane) const;
  std::vector<std::string> lane_names() const;
  double now() const { return clock_(); }
  // True when `lane` runs on the device (device backend and Lane::runs_on_device()).
  bool on_device(const std::string& lane) const;

 private:
  struct LaneSlot;
  struct DeviceStep;

  bool ensure_setup(LaneSlot& slot);
  bool schedulable(const LaneSlot& slot) const;
  // Runs one step of `slot`, records it, quarantines on failure; returns false if quarantined.
  bool run_step(LaneSlot& slot, int iteration, int gap_id, WaitKind kind, double predicted);
  void quarantine(LaneSlot& slot, const std::string& reason);
  // Counts the step in the lane's runaway window; sets `reason` when the lane is a runaway (see
  // GapSchedulerOptions). True when the step took longer than the factor allows (forgiven or not).
  bool runaway(LaneSlot& slot, int gap_id, double duration, double predicted, bool did_work, std::string* reason);
  void keep_records(const std::vector<LaneStepRecord>& steps);
  void freeze_plan();
  // Device lanes: posts one step of `slot` to the lane's host thread, which runs it between two
  // events on the lane's stream; returns without waiting for it.
  void enqueue_device_step(LaneSlot& slot, int iteration, int gap_id, WaitKind kind, double predicted);
  // True when `slot` has max_device_backlog_steps posted steps still to return (told once).
  bool device_backlog_full(LaneSlot& slot);
  // Accounts the posted steps whose host part has returned and whose events have completed, in
  // posting order (all of them, waiting, with `wait`); quarantines a lane whose step failed.
  void settle_device_steps(bool wait);
  void account_device_step(DeviceStep& step);  // its time, harvest and overrun from its events
  LaneSlot* find(const std::string& name);
  const LaneSlot* find(const std::string& name) const;

  Backend& backend_;
  bool device_backend_ = false;  // lanes that run_on_device() get pool arenas and event timing
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
  std::vector<LaneStepRecord> recent_;  // steps of the current gap (or calibration step)
  std::vector<std::unique_ptr<DeviceStep>> device_steps_;  // enqueued, not yet accounted
  // Sums over every gap, kept or not.
  struct GapTotals {
    std::size_t count = 0;
    double bubble_s = 0;
    double bubble_after_profiling_s = 0;
    double harvested_after_profiling_s = 0;
  } gap_totals_;
};

}  // namespace pipelane
