// [lanes] plan (trainer/run/lane_plan.h): a run's summary.json replayed, each rank getting its plan,
// and every way a plan can fail to fit the run refused with one line naming the file.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "tests/datasets/test_files.h"
#include "trainer/run/lane_plan.h"
#include "trainer/run/run_summary.h"

namespace pipelane {
namespace {

using test_support::TempDir;
using test_support::write_file;

TrainOptions replay(const std::string& plan) {
  TrainOptions o;
  o.parallel.pp = 2;
  o.train.global_batch = 8;
  o.train.micro_batch = 2;  // 4 microbatches
  o.lanes.enabled = "pagerank,imageproc";
  o.lanes.profile_iterations = 2;
  o.lanes.plan = plan;
  return o;
}

constexpr ParallelDims kPp2{1, 1, 2};

nlohmann::json rank_entry(int rank, int stage, bool deterministic = true) {
  StageLaneSummary s;
  s.rank = rank;
  s.stage = stage;
  s.deterministic = deterministic;
  s.profile_iterations = 2;
  s.lanes["pagerank"].work_unit = "edges";
  s.lanes["imageproc"].work_unit = "images";
  if (deterministic) s.plan = {{1, {"pagerank", "imageproc"}}, {4 + rank, {"pagerank"}}};
  s.interference.emplace().control_every = 32;  // [lanes] control_every's default
  return to_json(s);
}

// A deterministic pp 2 run's summary.json (trainer/run/run_summary.h), each rank's plan in it.
nlohmann::json run_summary() {
  RunSummary s;
  s.training.emplace();
  s.parallel = {1, 1, 2, "1f1b", 1, 4};
  s.lanes.emplace();
  nlohmann::json j = to_json(s);
  j["lanes"]["per_rank"] = {rank_entry(0, 0), rank_entry(1, 1)};
  return j;
}

std::string plan_error(const TrainOptions& o, ParallelDims dims = kPp2) {
  try {
    load_lane_plans(o, dims);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(LanePlanFile, EveryRankGetsItsOwnPlan) {
  TempDir dir;
  write_file(dir.file("summary.json"), run_summary().dump());
  const std::map<int, LanePlan> plans = load_lane_plans(replay(dir.file("summary.json")), kPp2);
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_EQ(plans.at(0), (LanePlan{{1, {"pagerank", "imageproc"}}, {4, {"pagerank"}}}));
  EXPECT_EQ(plans.at(1), (LanePlan{{1, {"pagerank", "imageproc"}}, {5, {"pagerank"}}}));
  // Lanes only on stage 1: rank 0's entry must then be absent (null).
  nlohmann::json stage1 = run_summary();
  stage1["lanes"]["per_rank"][0] = nullptr;
  write_file(dir.file("stage1.json"), stage1.dump());
  TrainOptions only1 = replay(dir.file("stage1.json"));
  only1.lanes.stages = "1";
  EXPECT_EQ(load_lane_plans(only1, kPp2).count(0), 0u);
}

TEST(LanePlanFile, APlanThatDoesNotFitIsRefusedWithOneLine) {
  TempDir dir;
  const std::string path = dir.file("summary.json");
  write_file(path, run_summary().dump());
  EXPECT_EQ(plan_error(replay(dir.file("absent.json"))),
            dir.file("absent.json") + ": cannot open the file named by [lanes] plan");

  TrainOptions other_schedule = replay(path);
  other_schedule.parallel.schedule = "zb-h1";
  EXPECT_EQ(plan_error(other_schedule),
            path + ": the plan was made for schedule 1f1b, pp 2, virtual stages 1, 4 microbatches, tp 1, dp 1; this "
                   "run has schedule zb-h1, pp 2, virtual stages 1, 4 microbatches, tp 1, dp 1 (its gaps are other waits)");
  TrainOptions more_micro = replay(path);
  more_micro.train.global_batch = 16;
  EXPECT_NE(plan_error(more_micro).find("this run has schedule 1f1b, pp 2, virtual stages 1, 8 microbatches"),
            std::string::npos);
  EXPECT_NE(plan_error(replay(path), ParallelDims{1, 1, 4}).find("pp 4"), std::string::npos);

  TrainOptions other_lanes = replay(path);
  other_lanes.lanes.enabled = "pagerank";
  EXPECT_EQ(plan_error(other_lanes),
            path + ": rank 0 (stage 0) ran lanes imageproc, pagerank, this run [lanes] enabled = pagerank");
  TrainOptions stage0_only = replay(path);
  stage0_only.lanes.stages = "0";
  EXPECT_EQ(plan_error(stage0_only), path + ": rank 1 (stage 1) ran lanes in the plan's run, this run runs none there "
                                            "([lanes] stages)");
  TrainOptions profile = replay(path);
  profile.lanes.profile_iterations = 3;
  EXPECT_EQ(plan_error(profile), path + ": the plan's run profiled 2 iterations, this run [lanes] profile_iterations = 3");
  TrainOptions controls = replay(path);
  controls.lanes.control_every = 0;
  EXPECT_EQ(plan_error(controls),
            path + ": the plan's run left one gap in 32 empty as a control gap, this run [lanes] control_every = 0");
  // A plan from before control gaps left none empty: replayable only without them.
  nlohmann::json before = run_summary();
  for (auto& rank : before["lanes"]["per_rank"]) rank.erase("interference");
  write_file(path, before.dump());
  EXPECT_EQ(plan_error(replay(path)),
            path + ": the plan's run left no gap empty as a control gap, this run [lanes] control_every = 32");
  EXPECT_EQ(plan_error(controls), "(no error)");
  write_file(path, run_summary().dump());

  nlohmann::json swapped = run_summary();
  std::swap(swapped["lanes"]["per_rank"][0], swapped["lanes"]["per_rank"][1]);
  write_file(path, swapped.dump());
  EXPECT_EQ(plan_error(replay(path)), path + ": lanes.per_rank[0] is rank 1 stage 1, this run's rank 0 (stage 0)");

  nlohmann::json polling = run_summary();
  polling["lanes"]["per_rank"][1] = rank_entry(1, 1, false);
  write_file(path, polling.dump());
  EXPECT_NE(plan_error(replay(path)).find(path + ": rank 1 (stage 1) has no frozen plan"), std::string::npos);

  nlohmann::json stranger = run_summary();
  stranger["lanes"]["per_rank"][0]["plan"]["9"] = {"zebra"};
  write_file(path, stranger.dump());
  EXPECT_EQ(plan_error(replay(path)), path + ": rank 0 (stage 0): gap 9 plans lane 'zebra', which it does not run");

  nlohmann::json off = run_summary();
  off["lanes"] = nullptr;
  write_file(path, off.dump());
  EXPECT_EQ(plan_error(replay(path)), path + ": the run ran with lanes off: it has no lane plan");
  nlohmann::json no_parallel = run_summary();
  no_parallel.erase("parallel");
  write_file(path, no_parallel.dump());
  EXPECT_EQ(plan_error(replay(path)), path + ": cannot read 'parallel': missing");
  write_file(path, "not json");
  EXPECT_EQ(plan_error(replay(path)).rfind(path + ": not JSON (", 0), 0u);
}

}  // namespace
}  // namespace pipelane
