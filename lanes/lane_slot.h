// LaneSlot: one lane as a stage's GapScheduler holds it (lanes/ only; no other folder sees it):
// the lane behind its GuardedLane, its context (arena, stream, options, output directory), where
// it runs, its life (set up, torn down, quarantined), what its step costs, its device steps'
// bookkeeping and its accounting as the summary's LaneStats. make_lane_slot builds one from a
// LaneSpec; the slot's own methods set it up, quarantine it and tear it down.
#pragma once
#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lanes/device_lane_thread.h"
#include "lanes/gap_scheduler_options.h"
#include "lanes/isolation/guarded_lane.h"
#include "lanes/lane.h"
#include "lanes/lane_specs.h"
#include "lanes/lane_summary.h"
#include "runtime/arena.h"
#include "runtime/backend.h"

namespace pipelane {

// Receives one line per event worth telling the user (GapScheduler::Logger).
using LaneLogger = std::function<void(const std::string&)>;

inline constexpr double kMinStepCost = 1e-6;  // a planned step never counts as free

struct LaneSlot {
  std::string name;
  std::unique_ptr<GuardedLane> lane;
  LaneLimits limits;
  LaneOptions options;
  std::unique_ptr<Arena> arena;
  std::unique_ptr<Stream> stream;
  // A device lane (device backend, Lane::runs_on_device): its steps are timed by events on its
  // stream against `origin`, recorded there at start and seen complete at origin_s.
  bool on_device = false;
  std::unique_ptr<Event> origin;
  double origin_s = 0;
  std::vector<std::pair<double, bool>> calibration_device;  // event seconds, did work
  std::string output_dir;
  std::unique_ptr<LaneContext> ctx;
  bool set_up = false;
  bool torn_down = false;

  // What summary() reports: work unit, calibration's units and steps, harvest, overrun, costs
  // (predicted_step_s is the running prediction), finished (cached once finished() said so),
  // quarantine. Its units, steps and lane_s are set by the summary from `in_gaps` and the
  // calibration's: kept apart while running, the two sums add up as they always did (a lane's
  // units need not be integers: imageproc's are thirds of an image).
  LaneStats stats;
  struct {
    double units = 0;
    long steps = 0;
    double lane_s = 0;
  } in_gaps;
  double calibration_s = 0;

  bool has_cost = false;
  // The cost prediction comes from steps that did work: a lane with nothing to do yet (a prefill
  // queue before the first request) returns at once, and that is no measure of a real step.
  bool cost_from_work = false;
  // The last runaway_window steps in gaps: late or not (a ring), and how many were.
  std::vector<char> late;
  std::size_t late_next = 0;
  std::size_t late_seen = 0;
  int late_count = 0;
  double own_predicted_s = 0;  // EWMA of its own time where it ran (LaneStepCost::wall_s)
  std::vector<double> calibration_own_s;

  // Set on the host thread when a step failed (the lane is quarantined once the scheduler sees
  // it) and by quarantine(): steps posted after it do not run.
  std::atomic<bool> stopped{false};
  // Device steps posted, and returned on the host thread (the difference: its backlog).
  long posted_steps = 0;
  std::atomic<long> returned_steps{0};
  bool told_backlog = false;
  // A device lane's host thread (device_lane_thread.h): its steps run there, posted by fill().
  // Declared last: joined before the lane, context, arena and stream its tasks use go.
  std::unique_ptr<DeviceLaneThread> host_thread;

  void count_step(bool calibration, double step_units) {
    if (calibration) {
      stats.calibration_units += step_units;
      ++stats.calibration_steps;
    } else {
      in_gaps.units += step_units;
      ++in_gaps.steps;
    }
  }
  // Returns once no posted step of this lane runs (see DeviceLaneThread::wait_idle).
  void quiesce() {
    if (host_thread) host_thread->wait_idle();
  }
  bool schedulable() const {
    return set_up && !stats.quarantined && !torn_down && !stats.finished && has_cost;
  }
  // Sets the lane up unless it was (or the scheduler is torn down); false when it is quarantined.
  bool ensure_setup(bool scheduler_torn_down, const LaneLogger& logger);
  // Stops the lane for good (its posted steps do not run; teardown() once), says why, once.
  void quarantine(const std::string& reason, const LaneLogger& logger);
  // The lane's teardown() if it was set up and not torn down yet; a failure is only said.
  void teardown(const LaneLogger& logger);
};

using LaneSlots = std::vector<std::unique_ptr<LaneSlot>>;

// The slot of `spec`'s lane, called `name`: its arena (lane_memory_bytes: device memory on the
// CPU backend, pool memory for a device lane, else host memory), a low-priority stream, on the
// device its host thread and origin event (seen complete at clock()), its output directory and
// seed. A lane that is not a GuardedLane runs in a ThreadLane. Nothing of the lane runs here.
std::unique_ptr<LaneSlot> make_lane_slot(std::string name, LaneSpec spec, Backend& backend, bool device_backend,
                                         const GapSchedulerOptions& options, const std::function<double()>& clock);

// Calls the lane's step(); returns what went wrong as the lane's quarantine reason ("" when the
// step succeeded, its units in *units).
std::string call_step(GuardedLane& lane, LaneContext& ctx, double* units);

}  // namespace pipelane
