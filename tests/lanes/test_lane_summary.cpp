// Lane summaries as typed data (lanes/lane_summary.h): combined over ranks and per stage, and the
// JSON edge — summary.json's field names, and a summary read back from its JSON unchanged.
#include <gtest/gtest.h>

#include <set>

#include "lanes/lane_summary.h"

namespace pipelane {
namespace {

StageLaneSummary rank_summary(int rank, int stage, double units, bool quarantined = false) {
  StageLaneSummary s;
  s.rank = rank;
  s.stage = stage;
  s.gaps = 10;
  s.bubble_s = 2.0;
  s.harvested_s = 1.5;
  s.overrun_s = 0.25;
  s.bubble_after_profiling_s = 1.0;
  s.harvested_after_profiling_s = 0.75;
  s.margin = 0.9;
  s.deterministic = true;
  s.profile_iterations = 2;
  LaneStats& lane = s.lanes["pagerank"];
  lane.work_unit = "edges";
  lane.units = units;
  lane.steps = 5;
  lane.lane_s = 2.0;
  lane.calibration_units = 3;
  lane.calibration_steps = 3;
  lane.harvested_s = 1.5;
  lane.overrun_s = 0.25;
  lane.calibrated_step_s = 0.002;
  lane.predicted_step_s = 0.003;
  lane.memory_high_water_bytes = 4096;
  lane.report = {{"iterations", 7}};
  if (quarantined) {
    lane.quarantined = true;
    lane.quarantine_reason = "step failed: broken";
  }
  s.plan = {{3, {"pagerank", "pagerank"}}, {12, {}}};
  return s;
}

std::set<std::string> keys(const nlohmann::json& object) {
  std::set<std::string> out;
  for (const auto& [key, value] : object.items()) out.insert(key);
  return out;
}

TEST(LaneSummary, StageJsonHasSummaryJsonsFieldsAndReadsBackUnchanged) {
  const StageLaneSummary s = rank_summary(1, 0, 40, true);
  const nlohmann::json j = to_json(s);
  // The per-rank fields scripts/bench/lanes.sh and users read.
  EXPECT_EQ(keys(j), (std::set<std::string>{"stage", "rank", "gaps", "bubble_s", "harvested_s", "harvest_fraction",
                                            "bubble_after_profiling_s", "harvested_after_profiling_s",
                                            "harvest_fraction_after_profiling", "overrun_s", "margin", "deterministic",
                                            "profile_iterations", "calibrated_step_s", "lanes", "quarantined", "plan"}));
  EXPECT_DOUBLE_EQ(j["harvest_fraction"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(j["lanes"]["pagerank"]["units_per_s"].get<double>(), 20.0);
  EXPECT_EQ(j["quarantined"], nlohmann::json::parse(R"([{"lane": "pagerank", "reason": "step failed: broken"}])"));
  EXPECT_EQ(j["plan"], nlohmann::json::parse(R"({"3": ["pagerank", "pagerank"], "12": []})"));

  const StageLaneSummary back = stage_lane_summary_from_json(nlohmann::json::parse(j.dump()));
  EXPECT_EQ(to_json(back), j);
  EXPECT_EQ(back.plan, s.plan);
  EXPECT_EQ(back.lanes.at("pagerank").quarantine_reason, "step failed: broken");
}

TEST(LaneSummary, MalformedJsonNamesTheField) {
  const auto error = [](const char* text) {
    try {
      stage_lane_summary_from_json(nlohmann::json::parse(text));
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(error(R"({"rank": 0, "lanes": {}})"), "lane summary: no 'stage'");
  EXPECT_EQ(error(R"({"stage": "one", "rank": 0, "lanes": {}})"), "lane summary: 'stage' has the wrong type");
  EXPECT_EQ(error(R"({"stage": 0, "rank": 0, "lanes": {}, "plan": {"x": []}})"),
            "lane summary: plan gap id 'x' is not a non-negative integer");
  EXPECT_EQ(error(R"({"stage": 0, "rank": 0, "lanes": {}, "plan": {"4": "pagerank"}})"),
            "lane summary: plan gap 4 is not a list of lanes");
  EXPECT_EQ(error(R"({"stage": 0, "rank": 0, "lanes": {"a": {"units": "many"}}})"),
            "lane summary: 'units' has the wrong type");
}

TEST(LaneSummary, CombinesOverRanksAndPerStage) {
  const std::vector<StageLaneSummary> ranks = {rank_summary(0, 0, 10), rank_summary(1, 1, 30, true),
                                               rank_summary(2, 1, 50)};
  const CombinedLaneSummary total = combine_lane_summaries(ranks);
  EXPECT_DOUBLE_EQ(total.bubble_s, 6.0);
  EXPECT_DOUBLE_EQ(total.harvested_after_profiling_s, 2.25);
  const LaneTotal& pagerank = total.lanes.at("pagerank");
  EXPECT_DOUBLE_EQ(pagerank.units, 90);
  EXPECT_EQ(pagerank.steps, 15);
  EXPECT_DOUBLE_EQ(pagerank.calibration_units, 9);
  EXPECT_DOUBLE_EQ(pagerank.units_per_lane_s(), 15);
  ASSERT_EQ(total.quarantined.size(), 1u);
  EXPECT_EQ(total.quarantined[0].rank, 1);

  const std::vector<CombinedLaneSummary> stages = lane_summaries_per_stage(ranks, 3);
  ASSERT_EQ(stages.size(), 3u);
  EXPECT_DOUBLE_EQ(stages[0].lanes.at("pagerank").units, 10);
  EXPECT_DOUBLE_EQ(stages[1].lanes.at("pagerank").units, 80);
  EXPECT_TRUE(stages[2].lanes.empty());  // a stage without lanes

  const nlohmann::json j = to_json(total);
  EXPECT_EQ(keys(j), (std::set<std::string>{"bubble_s", "harvested_s", "harvest_fraction", "overrun_s",
                                            "bubble_after_profiling_s", "harvested_after_profiling_s",
                                            "harvest_fraction_after_profiling", "lanes", "quarantined"}));
  EXPECT_EQ(keys(j["lanes"]["pagerank"]), (std::set<std::string>{"work_unit", "units", "steps", "lane_s",
                                                                  "calibration_units", "harvested_s", "overrun_s",
                                                                  "units_per_lane_s"}));
  EXPECT_DOUBLE_EQ(j["harvest_fraction_after_profiling"].get<double>(), 0.75);
  EXPECT_EQ(j["quarantined"][0]["rank"], 1);
}

// The interference estimate sits next to overrun_s in every lanes entry: written only where a run
// made one (a summary from before it reads and writes back without it), read back unchanged, and
// added over ranks.
TEST(LaneSummary, TheInterferenceEstimateIsWrittenReadBackAndCombined) {
  StageLaneSummary a = rank_summary(0, 0, 10), b = rank_summary(1, 1, 30);
  EXPECT_FALSE(to_json(a).contains("interference"));
  EXPECT_FALSE(stage_lane_summary_from_json(to_json(a)).interference);
  InterferenceEstimate& e = a.interference.emplace();
  e.control_every = 32;
  e.control_gaps = 14;
  e.lane_gaps = 400;
  e.compared_lane_gaps = 380;
  e.compared_control_gaps = 13;
  e.estimated = true;
  e.extra_s = 0.125;
  e.stderr_s = 0.03;
  const nlohmann::json j = to_json(a);
  EXPECT_EQ(keys(j["interference"]), (std::set<std::string>{"control_every", "control_gaps", "lane_gaps",
                                                             "compared_lane_gaps", "compared_control_gaps",
                                                             "estimated_s", "stderr_s"}));
  EXPECT_DOUBLE_EQ(j["interference"]["estimated_s"].get<double>(), 0.125);
  const StageLaneSummary back = stage_lane_summary_from_json(nlohmann::json::parse(j.dump()));
  ASSERT_TRUE(back.interference);
  EXPECT_EQ(to_json(back), j);

  // Too few control gaps: null numbers and the reason, read back as not estimated.
  InterferenceEstimate& few = b.interference.emplace(e);
  few.estimated = false;
  few.compared_control_gaps = 3;
  const nlohmann::json none = to_json(b)["interference"];
  EXPECT_TRUE(none["estimated_s"].is_null());
  EXPECT_TRUE(none["stderr_s"].is_null());
  EXPECT_EQ(none["not_estimated"], "not enough control gaps (3 compared; each rank needs 8)");
  EXPECT_FALSE(interference_estimate_from_json(none).estimated);

  const CombinedLaneSummary total = combine_lane_summaries({a, b});
  ASSERT_TRUE(total.interference);
  EXPECT_EQ(total.interference->control_gaps, 28);
  EXPECT_FALSE(total.interference->estimated) << "rank 1 has no number, so the job has none";
  b.interference->estimated = true;
  b.interference->stderr_s = 0.04;
  const CombinedLaneSummary both = combine_lane_summaries({a, b});
  EXPECT_DOUBLE_EQ(both.interference->extra_s, 0.25);
  EXPECT_DOUBLE_EQ(both.interference->stderr_s, 0.05);
  EXPECT_DOUBLE_EQ(to_json(both)["interference"]["estimated_s"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(lane_summaries_per_stage({a, b}, 2)[1].interference->extra_s, 0.125);
}

}  // namespace
}  // namespace pipelane
