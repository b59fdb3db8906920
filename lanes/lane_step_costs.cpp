#include "lanes/lane_step_costs.h"

#include <algorithm>
#include <cstdio>

#include "parallel/gap_fit.h"

namespace pipelane {
namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace

bool judge_runaway(LaneSlot& slot, const GapSchedulerOptions& options, int gap_id, double duration,
                   double predicted, bool did_work, std::string* reason) {
  // The lane's own time and its own prediction (see lane_timing), else the scheduler's.
  double own = duration, reference = predicted;
  LaneStepCost cost;
  if (options.lane_timing) {
    cost = slot.lane->last_step_cost();
    // Less the time it waited for a CPU: that was the machine. Never less than the CPU time it
    // used: the run-queue clock can run ahead on a virtual machine whose CPUs' clocks differ.
    if (cost.wall_s > 0) own = std::max(cost.cpu_s, cost.wall_s - std::max(0.0, cost.waiting_s));
    if (slot.own_predicted_s > 0) reference = slot.own_predicted_s;
  }
  const double bound = options.quarantine_factor * reference;
  const bool outlier = gap_id >= 0 && slot.cost_from_work && reference > 0 &&
                       is_runaway_step(own, reference, options.quarantine_factor, options.quarantine_min_s);
  // Without a run-queue clock: taken off the CPU while its own work stayed within bounds.
  const bool preempted = options.lane_timing && cost.waiting_s < 0 && cost.involuntary_switches > 0 &&
                         cost.cpu_s <= bound;
  if (gap_id < 0) {  // calibration: measured (its median starts the prediction), not judged
    if (did_work) slot.calibration_own_s.push_back(own);
    return false;
  }
  if (did_work && !outlier && own > 0) {  // the lane's own cost, kept for judging its next steps
    slot.own_predicted_s = slot.own_predicted_s > 0
                               ? options.ewma_alpha * own + (1 - options.ewma_alpha) * slot.own_predicted_s
                               : own;
  }
  const bool late = outlier && !preempted;
  const std::size_t window = slot.late.size();
  slot.late_count += (late ? 1 : 0) - slot.late[slot.late_next];
  slot.late[slot.late_next] = late ? 1 : 0;
  slot.late_next = (slot.late_next + 1) % window;
  slot.late_seen = std::min(slot.late_seen + 1, window);
  if (late && slot.late_count >= options.runaway_limit) {
    char text[240];
    std::snprintf(text, sizeof text, "%d of its last %zu steps took more than %gx the predicted %.6g s (the last %.6g s)",
                  slot.late_count, slot.late_seen, options.quarantine_factor, reference, own);
    *reason = text;
  }
  return outlier;
}

void learn_host_step_cost(LaneSlot& slot, const GapSchedulerOptions& options, double duration, double units,
                          bool outlier) {
  double& predicted = slot.stats.predicted_step_s;
  // A spike, the lane's or the machine's (a hand-over that waited for a CPU), is no measure of the
  // next step: one in the prediction could keep the lane out of every gap, and a lane that does
  // not fit is never measured again.
  const bool spike = outlier || (slot.cost_from_work && duration > options.quarantine_factor * predicted);
  if (units > 0 && !spike) {
    if (!slot.cost_from_work) {
      predicted = std::max(duration, kMinStepCost);
      slot.cost_from_work = slot.has_cost = true;
    } else {
      predicted = options.ewma_alpha * duration + (1 - options.ewma_alpha) * predicted;
    }
  }
}

void learn_device_step_cost(LaneSlot& slot, const GapSchedulerOptions& options, double duration, bool did_work) {
  if (!did_work) return;  // what the summary predicts; the plan's counts stay as frozen
  double& predicted = slot.stats.predicted_step_s;
  predicted = slot.cost_from_work ? options.ewma_alpha * duration + (1 - options.ewma_alpha) * predicted
                                  : std::max(duration, kMinStepCost);
  slot.cost_from_work = slot.has_cost = true;
}

void set_calibrated_cost(LaneSlot& slot, const std::vector<double>& durations, const std::vector<double>& productive) {
  // The median: a lane's first steps pay for warming up (page faults, first-use setup).
  if (!slot.calibration_own_s.empty()) slot.own_predicted_s = median(slot.calibration_own_s);
  if (!durations.empty()) {
    slot.stats.calibrated_step_s = slot.stats.predicted_step_s =
        std::max(median(productive.empty() ? durations : productive), kMinStepCost);
    slot.has_cost = true;
    slot.cost_from_work = !productive.empty();
  }
}

}  // namespace pipelane
