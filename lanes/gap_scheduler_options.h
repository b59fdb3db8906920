// GapSchedulerOptions: the knobs of one stage's GapScheduler (lanes/gap_scheduler.h), from [lanes].
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace pipelane {

struct GapSchedulerOptions {
  int stage = 0;
  int rank = 0;
  std::uint64_t seed = 0;
  std::size_t lane_memory_bytes = std::size_t{256} << 20;    // arena quota of each lane
  std::size_t stage_memory_bytes = std::size_t{1024} << 20;  // cap on all lanes of this stage
  double margin = 0.9;          // fill at most this share of a predicted gap
  bool deterministic = false;
  // After profiling, about one gap in control_every is left empty (lanes/control_gaps.h), so that
  // training's time after gaps left to the lanes and after control gaps can be compared (interference_estimate.h).
  // 0: none (the scheduler's own default; the trainer's [lanes] control_every turns it on).
  int control_every = 0;
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
  std::uint64_t lane_state_bytes = 0;   // the most a lane's save() may return; 0: no bound
  std::size_t max_records = 20000;      // step and gap records kept (see `record` in gap_scheduler.h)
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

}  // namespace pipelane
