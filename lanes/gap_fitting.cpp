#include "lanes/gap_fitting.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "parallel/gap_fit.h"

namespace pipelane {
namespace {

constexpr std::size_t kMaxPlannedStepsPerGap = 100000;

// Appends to `sequence` the steps of the lanes of one kind (device or host) that fit `budget`.
void fit_kind(const LaneSlots& slots, bool device, double budget, std::size_t limit, std::size_t& lane_cursor,
              std::vector<std::size_t>& sequence) {
  const auto planned_cost = [&](std::size_t i) {
    const LaneSlot& slot = *slots[i];
    return slot.schedulable() && slot.on_device == device
               ? std::optional(std::max(slot.stats.predicted_step_s, kMinStepCost))
               : std::nullopt;
  };
  double elapsed = 0;
  while (sequence.size() < limit) {
    const GapFitChoice choice = next_fitting_step(slots.size(), lane_cursor, elapsed, budget, planned_cost);
    if (!choice.found) break;
    sequence.push_back(choice.lane);
    elapsed += *planned_cost(choice.lane);
    lane_cursor = choice.cursor;
  }
}

}  // namespace

std::optional<double> live_host_step_cost(const LaneSlot& slot) {
  return slot.schedulable() && !slot.on_device ? std::optional(slot.stats.predicted_step_s) : std::nullopt;
}

IndexedLanePlan fit_lane_plan(const LaneSlots& slots, const std::map<int, double>& predicted_gaps,
                              const GapSchedulerOptions& options) {
  IndexedLanePlan plan;
  const std::size_t device_limit =
      options.max_device_steps_per_gap > 0
          ? std::min(kMaxPlannedStepsPerGap, static_cast<std::size_t>(options.max_device_steps_per_gap))
          : kMaxPlannedStepsPerGap;
  // Device lanes fill the gap on the device, host lanes on the CPU: each kind is fitted into the
  // gap on its own, device steps first (they are only enqueued). Host lanes are planned only in
  // deterministic mode.
  std::size_t device_cursor = 0, cursor = 0;
  for (const auto& [gap_id, predicted_gap] : predicted_gaps) {  // ascending gap id: the order of the list
    std::vector<std::size_t>& sequence = plan[gap_id];
    const double budget = gap_budget(predicted_gap, options.margin);
    fit_kind(slots, true, budget, device_limit, device_cursor, sequence);
    if (options.deterministic) fit_kind(slots, false, budget, kMaxPlannedStepsPerGap, cursor, sequence);
  }
  return plan;
}

LanePlan named_lane_plan(const IndexedLanePlan& plan, const LaneSlots& slots) {
  LanePlan named;
  for (const auto& [gap_id, sequence] : plan) {
    std::vector<std::string>& names = named[gap_id];
    for (const std::size_t index : sequence) names.push_back(slots[index]->name);
  }
  return named;
}

IndexedLanePlan indexed_lane_plan(const LanePlan& plan, const LaneSlots& slots) {
  IndexedLanePlan indexed;
  for (const auto& [gap_id, names] : plan) {
    std::vector<std::size_t>& sequence = indexed[gap_id];
    for (const std::string& name : names) {
      std::size_t index = 0;
      while (index < slots.size() && slots[index]->name != name) ++index;
      if (index == slots.size())
        throw LaneError("lane plan: gap " + std::to_string(gap_id) + " names lane '" + name +
                        "', which does not run on this stage");
      sequence.push_back(index);
    }
  }
  return indexed;
}

void warn_lanes_longer_than_every_gap(const LaneSlots& slots, const std::map<int, double>& predicted_gaps,
                                      double margin, const LaneLogger& logger) {
  double largest = 0;
  for (const auto& [gap_id, length] : predicted_gaps) largest = std::max(largest, length);
  for (const auto& owned : slots) {
    const LaneSlot& slot = *owned;
    if (slot.stats.quarantined || slot.stats.finished || !slot.has_cost) continue;
    if (slot.stats.predicted_step_s > largest * margin) {
      char text[320];
      std::snprintf(text, sizeof text,
                    "lane %s takes %.3g ms a step, more than the largest gap (%.3g ms x "
                    "margin %.2g): it will not run here; give it smaller steps",
                    slot.name.c_str(), slot.stats.predicted_step_s * 1e3, largest * 1e3, margin);
      logger(text);
    }
  }
}

}  // namespace pipelane
