#include "lanes/device_lane_queue.h"

#include <algorithm>
#include <atomic>
#include <string>

#include "lanes/lane_step_costs.h"

namespace pipelane {

// A device lane's step, posted to the lane's host thread, run there between two events on its
// stream, and accounted once its host part has returned and its events have completed.
struct DeviceLaneQueue::Step {
  LaneSlot* slot = nullptr;
  // Written on the lane's host thread before `returned` is set, read by the scheduler after.
  std::unique_ptr<Event> start, end;
  bool ran = false;       // false: not run (the lane had finished, or failed before)
  bool timed = false;     // both events recorded around it
  bool finished = false;  // the lane's finished() after it
  std::string failure;    // the quarantine reason; "" when it succeeded
  std::atomic<bool> returned{false};
  LaneStepRecord record;  // units from the step, start_s/end_s from the events
  // The gap it was enqueued in (set when fill() returns; calibration steps have gap_id -1).
  double gap_start_s = 0, gap_arrived_s = 0;
  bool profiling = false;
  std::size_t gap_record = GapAccounting::kNotKept;  // its GapRecord in the accounting, if kept
};

DeviceLaneQueue::DeviceLaneQueue(Backend& backend, const GapSchedulerOptions& options, const LaneLogger& logger)
    : backend_(backend), options_(options), logger_(logger) {}

DeviceLaneQueue::~DeviceLaneQueue() = default;

void DeviceLaneQueue::post(LaneSlot& slot, int iteration, int gap_id, WaitKind kind, double predicted) {
  // The deadline bounds the host's part (enqueueing, and the lane's own waits on its stream).
  LaneLimits limits = slot.limits;
  limits.step_deadline_s = gap_id < 0 ? options_.call_deadline_s
                                      : std::max(options_.step_deadline_factor * predicted, options_.step_deadline_min_s);
  ++slot.posted_steps;
  auto owned = std::make_unique<Step>();
  Step& step = *owned;
  step.slot = &slot;
  step.record = {iteration, gap_id, kind, slot.name, 0, 0, 0};
  steps_.push_back(std::move(owned));
  Backend& backend = backend_;
  slot.host_thread->post([&backend, &slot, &step, limits] {
    if (!slot.stopped && !slot.lane->finished()) {
      step.ran = true;
      try {
        step.start = backend.create_event();  // here: the device is set on the thread that records
        step.end = backend.create_event();
        slot.lane->set_limits(limits);
        step.start->record(*slot.stream);
        double units = 0;
        step.failure = call_step(*slot.lane, *slot.ctx, &units);
        step.end->record(*slot.stream);
        step.timed = true;
        // Kept even when it failed: the time was spent either way (units count only on success).
        if (step.failure.empty()) step.record.units = units;
        step.finished = slot.lane->finished();
      } catch (const std::exception& error) {  // the device refused an event
        step.failure = "its step's events failed: " + std::string(error.what());
      } catch (...) {
        step.failure = "its step's events failed";
      }
      if (!step.failure.empty()) slot.stopped = true;
    }
    ++slot.returned_steps;
    step.returned.store(true, std::memory_order_release);  // the last touch: the step may go now
  });
}

bool DeviceLaneQueue::backlog_full(LaneSlot& slot) {
  const long limit = options_.max_device_backlog_steps;
  if (limit <= 0 || slot.posted_steps - slot.returned_steps < limit) return false;
  if (!slot.told_backlog) {
    slot.told_backlog = true;
    logger_("lane '" + slot.name + "' has " + std::to_string(limit) +
            " device steps still to run: it cannot keep up with its gaps, so gaps skip its steps until it catches up");
  }
  return true;
}

void DeviceLaneQueue::stamp_gap(std::size_t first, const GapRecord& record, std::size_t gap_index) {
  for (std::size_t i = first; i < steps_.size(); ++i) {
    Step& d = *steps_[i];
    d.gap_start_s = record.start_s;
    d.gap_arrived_s = record.arrived_s;
    d.profiling = record.profiling;
    d.gap_record = gap_index;
  }
}

void DeviceLaneQueue::settle(bool wait, GapAccounting& accounting) {
  std::size_t done = 0;
  for (; done < steps_.size(); ++done) {
    Step& d = *steps_[done];
    LaneSlot& slot = *d.slot;
    if (!d.returned.load(std::memory_order_acquire)) {
      if (!wait) break;  // in posting order: the rest at a later call
      slot.quiesce();
    }
    if (!d.ran) {  // posted after the lane finished or failed: no step
      accounting.drop_device_step(d.gap_record);
      continue;
    }
    if (d.timed) {
      if (wait)
        d.end->synchronize();
      else if (!d.end->query())
        break;
      account(d, accounting);
    }
    if (d.failure.empty()) {
      slot.count_step(d.record.gap_id < 0, d.record.units);
      slot.stats.finished = d.finished;
    }
    accounting.keep_steps({d.record});
    if (!d.failure.empty()) slot.quarantine(d.failure, logger_);
  }
  steps_.erase(steps_.begin(), steps_.begin() + static_cast<std::ptrdiff_t>(done));
}

void DeviceLaneQueue::account(Step& d, GapAccounting& accounting) {
  LaneSlot& slot = *d.slot;
  d.record.start_s = slot.origin_s + d.start->elapsed_ms_since(*slot.origin) * 1e-3;
  d.record.end_s = slot.origin_s + d.end->elapsed_ms_since(*slot.origin) * 1e-3;
  const double duration = std::max(0.0, d.record.end_s - d.record.start_s);
  const bool did_work = d.record.units > 0;
  if (d.record.gap_id < 0) {
    slot.calibration_s += duration;
    slot.calibration_device.emplace_back(duration, did_work);
    return;
  }
  // On the device a step may start before the gap (queued behind earlier lane work) or after
  // the arrival: only its overlap with [gap start, arrival] is harvest.
  const double inside =
      std::max(0.0, std::min(d.record.end_s, d.gap_arrived_s) - std::max(d.record.start_s, d.gap_start_s));
  const double after = std::max(0.0, d.record.end_s - std::max(d.record.start_s, d.gap_arrived_s));
  slot.in_gaps.lane_s += duration;
  slot.stats.harvested_s += inside;
  slot.stats.overrun_s += after;
  accounting.add_device_harvest(d.gap_record, d.profiling, inside);
  learn_device_step_cost(slot, options_, duration, did_work);
}

}  // namespace pipelane
