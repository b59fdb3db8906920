// What a lane's step costs, as the gap scheduler predicts and judges it: the first prediction
// from calibration (a median), refined by an EWMA of real steps that did work (a spike left out),
// and the runaway rule that quarantines a lane whose steps take far longer than predicted too
// often (GapSchedulerOptions: quarantine_factor, runaway_window, runaway_limit, lane_timing).
#pragma once
#include <string>
#include <vector>

#include "lanes/gap_scheduler_options.h"
#include "lanes/lane_slot.h"

namespace pipelane {

// Counts a step of `slot` (gap_id < 0: calibration, only measured) in the lane's runaway window;
// sets `reason` when the lane is a runaway. True when the step took longer than the factor allows
// (forgiven or not).
bool judge_runaway(LaneSlot& slot, const GapSchedulerOptions& options, int gap_id, double duration,
                   double predicted, bool did_work, std::string* reason);

// A host step of `duration` that returned `units` (`outlier`: judge_runaway said so) refines the
// prediction unless it was a spike.
void learn_host_step_cost(LaneSlot& slot, const GapSchedulerOptions& options, double duration, double units,
                          bool outlier);

// A device step's event time refines the prediction when it did work.
void learn_device_step_cost(LaneSlot& slot, const GapSchedulerOptions& options, double duration, bool did_work);

// The calibration's steps (`durations`, `productive` those that did work) give the first
// prediction; the lane's own calibration times the runaway rule's.
void set_calibrated_cost(LaneSlot& slot, const std::vector<double>& durations, const std::vector<double>& productive);

}  // namespace pipelane
