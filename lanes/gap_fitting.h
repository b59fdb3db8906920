// Which lane steps go into a gap, by the fit rule of parallel/gap_fit.h: the host lanes that may
// run a step now (fitted to the measured gap, live), the frozen plan of every gap id (device
// lanes always, host lanes in deterministic mode) as lane indices, the plan by lane names
// (summary.json, [lanes] plan) and back, and the one warning fitting owes the user: a lane whose
// step is longer than every gap never runs.
#pragma once
#include <cstddef>
#include <map>
#include <optional>
#include <vector>

#include "lanes/gap_scheduler_options.h"
#include "lanes/lane_slot.h"
#include "lanes/lane_summary.h"

namespace pipelane {

// Gap id -> the indices (into the stage's LaneSlots) of the lanes stepped there, in order.
using IndexedLanePlan = std::map<int, std::vector<std::size_t>>;

// What a step of `slot` is predicted to cost when fitted live into a gap, or nullopt when it may
// not run there (device lanes are only planned).
std::optional<double> live_host_step_cost(const LaneSlot& slot);

// The plan of every measured gap id (gap id -> EWMA of its length), fitted into its budget from
// the lanes' predicted costs: device steps first (at most max_device_steps_per_gap), then, in
// deterministic mode, host steps; each kind round-robin on its own cursor over the gaps in order.
IndexedLanePlan fit_lane_plan(const LaneSlots& slots, const std::map<int, double>& predicted_gaps,
                              const GapSchedulerOptions& options);

LanePlan named_lane_plan(const IndexedLanePlan& plan, const LaneSlots& slots);
// LaneError when the plan names a lane that does not run here.
IndexedLanePlan indexed_lane_plan(const LanePlan& plan, const LaneSlots& slots);

// Says once per lane (through `logger`) when its step is longer than every gap's budget: its cost
// is only re-measured when it runs, so it never will.
void warn_lanes_longer_than_every_gap(const LaneSlots& slots, const std::map<int, double>& predicted_gaps,
                                      double margin, const LaneLogger& logger);

}  // namespace pipelane
