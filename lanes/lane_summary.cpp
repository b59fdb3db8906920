#include "lanes/lane_summary.h"

#include <algorithm>
#include <stdexcept>

namespace pipelane {

namespace {

double fraction(double part, double whole) { return whole > 0 ? part / whole : 0.0; }

// A field of `json` converted to T; `fallback` when absent (summaries of older runs lack some).
template <typename T>
T read(const nlohmann::json& json, const char* key, T fallback) {
  const auto it = json.find(key);
  if (it == json.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    throw std::invalid_argument(std::string("lane summary: '") + key + "' has the wrong type");
  }
}

const nlohmann::json& required(const nlohmann::json& json, const char* key) {
  const auto it = json.find(key);
  if (it == json.end() || it->is_null()) throw std::invalid_argument(std::string("lane summary: no '") + key + "'");
  return *it;
}

LaneStats lane_stats_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw std::invalid_argument("lane summary: a lane entry is not an object");
  LaneStats s;
  s.work_unit = read<std::string>(j, "work_unit", "");
  s.units = read<double>(j, "units", 0);
  s.steps = read<long>(j, "steps", 0);
  s.lane_s = read<double>(j, "lane_s", 0);
  s.calibration_units = read<double>(j, "calibration_units", 0);
  s.calibration_steps = read<long>(j, "calibration_steps", 0);
  s.harvested_s = read<double>(j, "harvested_s", 0);
  s.overrun_s = read<double>(j, "overrun_s", 0);
  s.calibrated_step_s = read<double>(j, "calibrated_step_s", 0);
  s.predicted_step_s = read<double>(j, "predicted_step_s", 0);
  s.finished = read<bool>(j, "finished", false);
  s.quarantined = read<bool>(j, "quarantined", false);
  s.quarantine_reason = read<std::string>(j, "quarantine_reason", "");
  s.memory_high_water_bytes = read<std::size_t>(j, "memory_high_water_bytes", 0);
  s.isolation = read<std::string>(j, "isolation", "");
  s.runs_on = read<std::string>(j, "runs_on", "");
  s.backlog_skipped_steps = read<long>(j, "backlog_skipped_steps", 0);
  const auto report = j.find("report");
  if (report != j.end()) s.report = *report;
  return s;
}

LanePlan plan_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw std::invalid_argument("lane summary: 'plan' is not an object");
  LanePlan plan;
  for (const auto& [key, names] : j.items()) {
    std::size_t used = 0;
    int gap_id = -1;
    try {
      gap_id = std::stoi(key, &used);
    } catch (const std::exception&) {
    }
    if (used != key.size() || gap_id < 0)
      throw std::invalid_argument("lane summary: plan gap id '" + key + "' is not a non-negative integer");
    if (!names.is_array()) throw std::invalid_argument("lane summary: plan gap " + key + " is not a list of lanes");
    std::vector<std::string>& sequence = plan[gap_id];  // an empty gap is part of the plan too
    for (const auto& name : names) {
      if (!name.is_string()) throw std::invalid_argument("lane summary: plan gap " + key + " lists a non-string");
      sequence.push_back(name.get<std::string>());
    }
  }
  return plan;
}

void add(CombinedLaneSummary& total, const StageLaneSummary& rank) {
  if (rank.interference)
    total.interference = total.interference ? combine_interference(*total.interference, *rank.interference) : *rank.interference;
  total.bubble_s += rank.bubble_s;
  total.harvested_s += rank.harvested_s;
  total.overrun_s += rank.overrun_s;
  total.bubble_after_profiling_s += rank.bubble_after_profiling_s;
  total.harvested_after_profiling_s += rank.harvested_after_profiling_s;
  for (const auto& [name, lane] : rank.lanes) {
    LaneTotal& t = total.lanes[name];
    if (!lane.work_unit.empty()) t.work_unit = lane.work_unit;
    t.units += lane.units;
    t.steps += lane.steps;
    t.lane_s += lane.lane_s;
    t.calibration_units += lane.calibration_units;
    t.harvested_s += lane.harvested_s;
    t.overrun_s += lane.overrun_s;
    if (lane.quarantined) total.quarantined.push_back({name, rank.rank, lane.quarantine_reason});
  }
}

}  // namespace

double CombinedLaneSummary::harvest_fraction() const { return fraction(harvested_s, bubble_s); }
double CombinedLaneSummary::harvest_fraction_after_profiling() const {
  return fraction(harvested_after_profiling_s, bubble_after_profiling_s);
}

CombinedLaneSummary combine_lane_summaries(const std::vector<StageLaneSummary>& ranks) {
  CombinedLaneSummary total;
  for (const StageLaneSummary& rank : ranks) add(total, rank);
  return total;
}

std::vector<CombinedLaneSummary> lane_summaries_per_stage(const std::vector<StageLaneSummary>& ranks, int stages) {
  std::vector<CombinedLaneSummary> per_stage(static_cast<std::size_t>(std::max(stages, 0)));
  for (const StageLaneSummary& rank : ranks)
    if (rank.stage >= 0 && rank.stage < stages) add(per_stage[static_cast<std::size_t>(rank.stage)], rank);
  return per_stage;
}

nlohmann::json plan_to_json(const LanePlan& plan) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [gap_id, names] : plan) out[std::to_string(gap_id)] = names;
  return out;
}

nlohmann::json to_json(const InterferenceEstimate& e) {
  const auto number = [&e](double x) { return e.estimated ? nlohmann::json(x) : nlohmann::json(nullptr); };
  nlohmann::json out = {
      {"control_every", e.control_every},
      {"control_gaps", e.control_gaps},
      {"lane_gaps", e.lane_gaps},
      {"compared_lane_gaps", e.compared_lane_gaps},
      {"compared_control_gaps", e.compared_control_gaps},
      {"estimated_s", number(e.extra_s)},
      {"stderr_s", number(e.stderr_s)},
  };
  if (!e.estimated) out["not_estimated"] = why_not_estimated(e);
  return out;
}

InterferenceEstimate interference_estimate_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw std::invalid_argument("lane summary: 'interference' is not an object");
  InterferenceEstimate e;
  e.control_every = read<int>(j, "control_every", 0);
  e.control_gaps = read<long>(j, "control_gaps", 0);
  e.lane_gaps = read<long>(j, "lane_gaps", 0);
  e.compared_lane_gaps = read<long>(j, "compared_lane_gaps", 0);
  e.compared_control_gaps = read<long>(j, "compared_control_gaps", 0);
  const auto estimated = j.find("estimated_s");
  e.estimated = estimated != j.end() && !estimated->is_null();
  e.extra_s = read<double>(j, "estimated_s", 0);
  e.stderr_s = read<double>(j, "stderr_s", 0);
  return e;
}

nlohmann::json to_json(const LaneStats& s) {
  nlohmann::json out = {
      {"work_unit", s.work_unit},
      {"units", s.units},
      {"steps", s.steps},
      {"lane_s", s.lane_s},
      {"units_per_s", s.units_per_s()},
      {"harvested_s", s.harvested_s},
      {"overrun_s", s.overrun_s},
      {"calibration_units", s.calibration_units},
      {"calibration_steps", s.calibration_steps},
      {"calibrated_step_s", s.calibrated_step_s},
      {"predicted_step_s", s.predicted_step_s},
      {"finished", s.finished},
      {"quarantined", s.quarantined},
      {"memory_high_water_bytes", s.memory_high_water_bytes},
      {"isolation", s.isolation},
      {"runs_on", s.runs_on},
      {"backlog_skipped_steps", s.backlog_skipped_steps},
      {"report", s.report},
  };
  if (s.quarantined) out["quarantine_reason"] = s.quarantine_reason;
  return out;
}

nlohmann::json to_json(const StageLaneSummary& s) {
  nlohmann::json lanes = nlohmann::json::object();
  nlohmann::json quarantined = nlohmann::json::array();
  nlohmann::json calibrated = nlohmann::json::object();
  for (const auto& [name, lane] : s.lanes) {
    lanes[name] = to_json(lane);
    if (lane.quarantined) quarantined.push_back({{"lane", name}, {"reason", lane.quarantine_reason}});
    calibrated[name] = lane.calibrated_step_s;
  }
  nlohmann::json out = {
      {"stage", s.stage},
      {"rank", s.rank},
      {"gaps", s.gaps},
      {"bubble_s", s.bubble_s},
      {"harvested_s", s.harvested_s},
      {"harvest_fraction", fraction(s.harvested_s, s.bubble_s)},
      {"bubble_after_profiling_s", s.bubble_after_profiling_s},
      {"harvested_after_profiling_s", s.harvested_after_profiling_s},
      {"harvest_fraction_after_profiling", fraction(s.harvested_after_profiling_s, s.bubble_after_profiling_s)},
      {"overrun_s", s.overrun_s},
      {"margin", s.margin},
      {"deterministic", s.deterministic},
      {"profile_iterations", s.profile_iterations},
      {"calibrated_step_s", calibrated},
      {"lanes", lanes},
      {"quarantined", quarantined},
      {"plan", plan_to_json(s.plan)},
  };
  if (s.interference) out["interference"] = to_json(*s.interference);  // absent: a summary from before it
  return out;
}

nlohmann::json to_json(const CombinedLaneSummary& c) {
  nlohmann::json lanes = nlohmann::json::object();
  for (const auto& [name, t] : c.lanes) {
    nlohmann::json& out = lanes[name];
    out = {{"units", t.units},
           {"steps", t.steps},
           {"lane_s", t.lane_s},
           {"calibration_units", t.calibration_units},
           {"harvested_s", t.harvested_s},
           {"overrun_s", t.overrun_s},
           {"units_per_lane_s", t.units_per_lane_s()}};
    if (!t.work_unit.empty()) out["work_unit"] = t.work_unit;
  }
  nlohmann::json quarantined = nlohmann::json::array();
  for (const QuarantinedLane& q : c.quarantined)
    quarantined.push_back({{"lane", q.lane}, {"rank", q.rank}, {"reason", q.reason}});
  nlohmann::json out = {{"bubble_s", c.bubble_s},
                        {"harvested_s", c.harvested_s},
                        {"harvest_fraction", c.harvest_fraction()},
                        {"overrun_s", c.overrun_s},
                        {"bubble_after_profiling_s", c.bubble_after_profiling_s},
                        {"harvested_after_profiling_s", c.harvested_after_profiling_s},
                        {"harvest_fraction_after_profiling", c.harvest_fraction_after_profiling()},
                        {"lanes", lanes},
                        {"quarantined", quarantined}};
  if (c.interference) out["interference"] = to_json(*c.interference);
  return out;
}

StageLaneSummary stage_lane_summary_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw std::invalid_argument("lane summary: not an object");
  StageLaneSummary s;
  (void)required(j, "stage");
  (void)required(j, "rank");
  s.stage = read<int>(j, "stage", 0);
  s.rank = read<int>(j, "rank", 0);
  s.gaps = read<std::size_t>(j, "gaps", 0);
  s.bubble_s = read<double>(j, "bubble_s", 0);
  s.harvested_s = read<double>(j, "harvested_s", 0);
  s.overrun_s = read<double>(j, "overrun_s", 0);
  s.bubble_after_profiling_s = read<double>(j, "bubble_after_profiling_s", 0);
  s.harvested_after_profiling_s = read<double>(j, "harvested_after_profiling_s", 0);
  s.margin = read<double>(j, "margin", 0);
  s.deterministic = read<bool>(j, "deterministic", false);
  s.profile_iterations = read<int>(j, "profile_iterations", 0);
  const nlohmann::json& lanes = required(j, "lanes");
  if (!lanes.is_object()) throw std::invalid_argument("lane summary: 'lanes' is not an object");
  for (const auto& [name, lane] : lanes.items()) s.lanes[name] = lane_stats_from_json(lane);
  const auto plan = j.find("plan");
  if (plan != j.end() && !plan->is_null()) s.plan = plan_from_json(*plan);
  const auto interference = j.find("interference");
  if (interference != j.end() && !interference->is_null()) s.interference = interference_estimate_from_json(*interference);
  return s;
}

}  // namespace pipelane
