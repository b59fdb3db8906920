// The device lanes' posted steps: fill() posts a device lane's step to the lane's host thread
// (device_lane_thread.h), which runs it between two events on the lane's stream; the queue keeps
// every posted step, in posting order, until its host part has returned and its events have
// completed, then accounts it (its interval on the scheduler's clock from the events; harvest is
// its overlap with its gap before the arrival, overrun what lies after) and quarantines a lane
// whose step failed. It never waits unless told to (calibration, teardown).
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "lanes/gap_accounting.h"
#include "lanes/gap_scheduler_options.h"
#include "lanes/lane_slot.h"
#include "runtime/backend.h"

namespace pipelane {

class DeviceLaneQueue {
 public:
  DeviceLaneQueue(Backend& backend, const GapSchedulerOptions& options, const LaneLogger& logger);
  ~DeviceLaneQueue();
  DeviceLaneQueue(const DeviceLaneQueue&) = delete;
  DeviceLaneQueue& operator=(const DeviceLaneQueue&) = delete;

  // Posts one step of `slot` (gap_id -1: calibration) to the lane's host thread; returns without
  // waiting for it. Its deadline bounds the host's part.
  void post(LaneSlot& slot, int iteration, int gap_id, WaitKind kind, double predicted);
  // True when `slot` has max_device_backlog_steps posted steps still to return (told once).
  bool backlog_full(LaneSlot& slot);

  std::size_t size() const { return steps_.size(); }  // posted, not yet accounted
  // The steps posted since size() was `first` were posted in the gap of `record`, whose record
  // will be gap_index in `accounting` (GapAccounting::next_gap_index()).
  void stamp_gap(std::size_t first, const GapRecord& record, std::size_t gap_index);
  // Accounts the posted steps whose host part has returned and whose events have completed, in
  // posting order (all of them, waiting, with `wait`); quarantines a lane whose step failed.
  void settle(bool wait, GapAccounting& accounting);

 private:
  struct Step;
  // Its time, harvest and overrun from its events.
  void account(Step& step, GapAccounting& accounting);

  Backend& backend_;
  const GapSchedulerOptions& options_;
  const LaneLogger& logger_;
  std::vector<std::unique_ptr<Step>> steps_;
};

}  // namespace pipelane
