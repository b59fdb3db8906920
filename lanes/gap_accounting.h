// What a stage's gaps held, as records and totals: a record per lane step and per gap (the first
// `max_records` of each, for trace.json), every gap's length in an EWMA per gap id (the
// prediction the next fill of that gap is fitted to) and in running totals (bubble, harvest), and
// the stage's StageLaneSummary built from them and the lanes' own accounting.
#pragma once
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "lanes/gap_scheduler_options.h"
#include "lanes/lane_slot.h"
#include "lanes/lane_summary.h"
#include "parallel/gap_filler.h"

namespace pipelane {

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

class GapAccounting {
 public:
  static constexpr std::size_t kNotKept = static_cast<std::size_t>(-1);

  explicit GapAccounting(const GapSchedulerOptions& options) : options_(options) {}

  double predicted_gap_s(int gap_id) const;  // 0 when never measured
  const std::map<int, double>& predicted_gaps() const { return gap_ewma_; }  // gap id -> EWMA

  // A gap that ended: its host lane steps (run in it, in order) add their time, harvest and
  // overrun to their lanes and to the record; its length updates the gap id's EWMA and the
  // totals; both records are kept while there is room.
  void account_gap(GapRecord record, const std::vector<LaneStepRecord>& steps, LaneSlots& slots);
  // The index the next gap's record will have in gap_records(), or kNotKept when it will not be kept.
  std::size_t next_gap_index() const { return gaps_.size() < options_.max_records ? gaps_.size() : kNotKept; }
  // A device step's harvest, seen later than its gap (gap_index: next_gap_index() then).
  void add_device_harvest(std::size_t gap_index, bool profiling, double inside);
  // A device step that was posted in the gap but never ran (its lane had finished or failed).
  void drop_device_step(std::size_t gap_index);
  void keep_steps(const std::vector<LaneStepRecord>& steps);

  const std::vector<LaneStepRecord>& step_records() const { return steps_; }
  const std::vector<GapRecord>& gap_records() const { return gaps_; }

  // This stage's summary: the gap totals, and every lane's accounting (after its posted steps:
  // its report and arena high water come from the lane).
  StageLaneSummary summary(const LaneSlots& slots) const;

 private:
  const GapSchedulerOptions& options_;
  std::map<int, double> gap_ewma_;
  std::vector<LaneStepRecord> steps_;
  std::vector<GapRecord> gaps_;
  // Sums over every gap, kept or not.
  struct GapTotals {
    std::size_t count = 0;
    double bubble_s = 0;
    double bubble_after_profiling_s = 0;
    double harvested_after_profiling_s = 0;
  } totals_;
};

}  // namespace pipelane
