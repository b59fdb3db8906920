#include "lanes/gap_accounting.h"

#include <algorithm>

namespace pipelane {
namespace {

LaneSlot& slot_named(LaneSlots& slots, const std::string& name) {
  return **std::find_if(slots.begin(), slots.end(), [&](const auto& slot) { return slot->name == name; });
}

// A lane's LaneStats as the summary reports it: its work is its gap steps' and its calibration's.
LaneStats lane_stats(LaneSlot& slot) {
  slot.quiesce();  // report() and the arena's high water: after the posted steps
  LaneStats lane = slot.stats;
  lane.units = slot.in_gaps.units + slot.stats.calibration_units;
  lane.steps = slot.in_gaps.steps + slot.stats.calibration_steps;
  lane.lane_s = slot.in_gaps.lane_s + slot.calibration_s;
  lane.memory_high_water_bytes = slot.lane->memory_high_water();
  lane.isolation = isolation_name(slot.lane->isolation());
  lane.runs_on = slot.on_device ? "device" : "cpu";
  try {
    lane.report = slot.set_up ? slot.lane->report() : nlohmann::json(nullptr);
  } catch (const std::exception& error) {
    lane.report = {{"report_error", error.what()}};
  }
  return lane;
}

}  // namespace

double GapAccounting::predicted_gap_s(int gap_id) const {
  const auto it = gap_ewma_.find(gap_id);
  return it == gap_ewma_.end() ? 0 : it->second;
}

void GapAccounting::account_gap(GapRecord record, const std::vector<LaneStepRecord>& steps, LaneSlots& slots) {
  for (const LaneStepRecord& step : steps) {
    LaneSlot& slot = slot_named(slots, step.lane);
    const double inside = std::max(0.0, std::min(step.end_s, record.arrived_s) - step.start_s);
    const double after = std::max(0.0, step.end_s - std::max(step.start_s, record.arrived_s));
    slot.in_gaps.lane_s += step.end_s - step.start_s;
    slot.stats.harvested_s += inside;
    slot.stats.overrun_s += after;
    record.harvested_s += inside;
  }
  const double length = record.arrived_s - record.start_s;
  const auto previous = gap_ewma_.find(record.gap_id);
  gap_ewma_[record.gap_id] = previous == gap_ewma_.end()
                                 ? length
                                 : options_.ewma_alpha * length + (1 - options_.ewma_alpha) * previous->second;
  ++totals_.count;
  totals_.bubble_s += length;
  if (!record.profiling) {
    totals_.bubble_after_profiling_s += length;
    totals_.harvested_after_profiling_s += record.harvested_s;
  }
  keep_steps(steps);
  if (gaps_.size() < options_.max_records) gaps_.push_back(record);
}

void GapAccounting::add_device_harvest(std::size_t gap_index, bool profiling, double inside) {
  if (gap_index < gaps_.size()) gaps_[gap_index].harvested_s += inside;
  if (!profiling) totals_.harvested_after_profiling_s += inside;
}

void GapAccounting::drop_device_step(std::size_t gap_index) {
  if (gap_index < gaps_.size()) --gaps_[gap_index].lane_steps;
}

void GapAccounting::keep_steps(const std::vector<LaneStepRecord>& steps) {
  for (const LaneStepRecord& step : steps)
    if (steps_.size() < options_.max_records) steps_.push_back(step);
}

StageLaneSummary GapAccounting::summary(const LaneSlots& slots) const {
  StageLaneSummary out;
  out.stage = options_.stage;
  out.rank = options_.rank;
  // From the running totals: the records themselves are only the first max_records.
  out.gaps = totals_.count;
  out.bubble_s = totals_.bubble_s;
  out.bubble_after_profiling_s = totals_.bubble_after_profiling_s;
  out.harvested_after_profiling_s = totals_.harvested_after_profiling_s;
  out.margin = options_.margin;
  out.deterministic = options_.deterministic;
  out.profile_iterations = options_.profile_iterations;
  for (const auto& owned : slots) {
    LaneSlot& slot = *owned;
    out.lanes[slot.name] = lane_stats(slot);
    out.harvested_s += slot.stats.harvested_s;
    out.overrun_s += slot.stats.overrun_s;
  }
  return out;
}

}  // namespace pipelane
