// Lane accounting as typed data: what one stage's GapScheduler did (StageLaneSummary), and the
// same combined over ranks (CombinedLaneSummary: the whole job, or one pipeline stage). JSON only
// at the edges: to_json for summary.json, stage_lane_summary_from_json for reading one back (a
// run's plan replayed). The JSON field names are summary.json's (scripts and tests read them).
#pragma once
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lanes/interference_estimate.h"

namespace pipelane {

// Deterministic mode's plan: gap id -> the lane names run in that gap, in order.
using LanePlan = std::map<int, std::vector<std::string>>;

// One lane on one stage.
struct LaneStats {
  std::string work_unit;
  // Everything the lane did, its calibration before training included (calibration_* is that part).
  double units = 0;
  long steps = 0;
  double lane_s = 0;
  double calibration_units = 0;
  long calibration_steps = 0;
  // Steps in gaps only: lane time inside the wait before the transfer arrived, and after it.
  double harvested_s = 0;
  double overrun_s = 0;
  double calibrated_step_s = 0;
  double predicted_step_s = 0;
  bool finished = false;
  bool quarantined = false;
  std::string quarantine_reason;  // empty unless quarantined
  std::size_t memory_high_water_bytes = 0;
  std::string isolation;  // where it ran: "thread" or "process" (lanes/isolation/)
  std::string runs_on;    // "device" (a device lane on a GPU backend: pool arena, Low stream) or "cpu"
  // Device lanes: steps the frozen plan placed that gaps skipped because the lane had
  // max_device_backlog_steps posted steps still to run (it could not keep up).
  long backlog_skipped_steps = 0;
  nlohmann::json report;  // the lane's own Lane::report() (lane-specific fields); null if never set up

  double units_per_s() const { return lane_s > 0 ? units / lane_s : 0.0; }
};

// One stage's GapScheduler (one rank).
struct StageLaneSummary {
  int stage = 0;
  int rank = 0;
  std::size_t gaps = 0;
  double bubble_s = 0;     // sum of gap lengths
  double harvested_s = 0;  // lane time inside gaps before the arrival
  double overrun_s = 0;
  // The same after the profile iterations (whose gaps are only measured): what a long run converges to.
  double bubble_after_profiling_s = 0;
  double harvested_after_profiling_s = 0;
  double margin = 0;
  bool deterministic = false;
  int profile_iterations = 0;
  std::map<std::string, LaneStats> lanes;
  LanePlan plan;  // deterministic mode; empty otherwise
  // The cost overrun does not show, from control gaps (lanes/interference_estimate.h); none in
  // summaries written before it existed.
  std::optional<InterferenceEstimate> interference;
};

// Lane totals over ranks.
struct LaneTotal {
  std::string work_unit;
  double units = 0;
  long steps = 0;
  double lane_s = 0;
  double calibration_units = 0;
  double harvested_s = 0;
  double overrun_s = 0;

  double units_per_lane_s() const { return lane_s > 0 ? units / lane_s : 0.0; }
};

struct QuarantinedLane {
  std::string lane;
  int rank = 0;
  std::string reason;
};

struct CombinedLaneSummary {
  double bubble_s = 0;
  double harvested_s = 0;
  double overrun_s = 0;
  double bubble_after_profiling_s = 0;
  double harvested_after_profiling_s = 0;
  std::map<std::string, LaneTotal> lanes;
  std::vector<QuarantinedLane> quarantined;
  std::optional<InterferenceEstimate> interference;  // over the ranks that had one

  double harvest_fraction() const;  // harvested_s / bubble_s (0 without waits); the same after profiling:
  double harvest_fraction_after_profiling() const;
};

// Sums over `ranks` (all of them: the job's totals).
CombinedLaneSummary combine_lane_summaries(const std::vector<StageLaneSummary>& ranks);
// One CombinedLaneSummary per pipeline stage 0 .. stages-1, over that stage's ranks.
std::vector<CombinedLaneSummary> lane_summaries_per_stage(const std::vector<StageLaneSummary>& ranks, int stages);

nlohmann::json to_json(const LaneStats& lane);
nlohmann::json to_json(const StageLaneSummary& summary);
nlohmann::json to_json(const CombinedLaneSummary& combined);
nlohmann::json plan_to_json(const LanePlan& plan);
// "interference": the estimate's counts, "estimated_s" and "stderr_s" (null with "not_estimated"
// saying why when there is no number). The inverse throws std::invalid_argument naming the field.
nlohmann::json to_json(const InterferenceEstimate& estimate);
InterferenceEstimate interference_estimate_from_json(const nlohmann::json& json);

// The inverse of to_json(StageLaneSummary). std::invalid_argument naming the field for JSON that
// is not one (a wrong type, a missing field, a gap id that is not an integer).
StageLaneSummary stage_lane_summary_from_json(const nlohmann::json& json);

}  // namespace pipelane
