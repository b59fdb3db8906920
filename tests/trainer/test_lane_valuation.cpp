// LaneValuation: the overhead and FreeRide-style cost saving written into summary.json, from a
// lanes-off run's summary.json and `pipelane lane-bench --json` lines; bad files stop the run
// before training with the file (and line) named.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "tests/datasets/test_files.h"
#include "trainer/lane_valuation.h"

namespace pipelane {
namespace {

using test_support::TempDir;
using test_support::write_file;

TrainOptions lanes_on(const std::string& baseline, const std::string& dedicated) {
  TrainOptions o;
  o.train.steps = 20;
  o.parallel.pp = 2;
  o.lanes.enabled = "pagerank,imageproc";
  o.lanes.baseline = baseline;
  o.lanes.dedicated = dedicated;
  return o;
}

const char* kBaseline =
    R"({"steps": 20, "train_seconds": 10.0, "step_ms_median": 400.0, "lanes": null,
        "parallel": {"tp": 1, "dp": 1, "pp": 2, "schedule": "1f1b"}})";
const char* kDedicated =
    "{\"lane\": \"pagerank\", \"units_per_s\": 1000.0}\n\n{\"lane\": \"imageproc\", \"units_per_s\": 50.0}\n";

nlohmann::json lanes_total() {
  return {{"bubble_s", 4.0},
          {"harvested_s", 3.0},
          {"lanes", {{"pagerank", {{"units", 2000.0}}}, {"imageproc", {{"units", 100.0}}}}}};
}

TEST(LaneValuation, OverheadAndCostSavingFollowFreeRidesFormulas) {
  TempDir dir;
  write_file(dir.file("off.json"), kBaseline);
  write_file(dir.file("bench.jsonl"), kDedicated);
  const LaneValuation v = LaneValuation::load(lanes_on(dir.file("off.json"), dir.file("bench.jsonl")), 2);
  nlohmann::json total = lanes_total();
  v.annotate(total, 10.5, 410.0, 2);
  EXPECT_NEAR(total["overhead"]["fraction"].get<double>(), 0.05, 1e-12);
  EXPECT_NEAR(total["overhead"]["step_median_fraction"].get<double>(), 0.025, 1e-12);
  // value = 2000/1000 + 100/50 = 4 device-s; extra = 2 ranks x 0.5 s = 1; training = 2 x 10 = 20.
  EXPECT_NEAR(total["cost_saving"]["value_device_s"].get<double>(), 4.0, 1e-12);
  EXPECT_NEAR(total["cost_saving"]["extra_device_s"].get<double>(), 1.0, 1e-12);
  EXPECT_NEAR(total["cost_saving"]["fraction"].get<double>(), 0.15, 1e-12);
  EXPECT_FALSE(total["cost_saving"]["gross"].get<bool>());
  EXPECT_NEAR(total["lanes"]["imageproc"]["units_per_train_s"].get<double>(), 100 / 10.5, 1e-12);
  EXPECT_NEAR(total["lanes"]["imageproc"]["value_device_s"].get<double>(), 2.0, 1e-12);
}

TEST(LaneValuation, WithoutInputsTheEntriesAreNullAndSayWhatWouldFillThem) {
  const LaneValuation v = LaneValuation::load(lanes_on("", ""), 2);
  nlohmann::json total = lanes_total();
  v.annotate(total, 10.5, 410.0, 2);
  EXPECT_TRUE(total["overhead"].is_null());
  EXPECT_TRUE(total["cost_saving"].is_null());
  EXPECT_NE(total["overhead_needs"].get<std::string>().find("[lanes] baseline"), std::string::npos);
  EXPECT_NE(total["cost_saving_needs"].get<std::string>().find("[lanes] dedicated"), std::string::npos);
  EXPECT_TRUE(total["lanes"]["pagerank"]["value_device_s"].is_null());
}

TEST(LaneValuation, WithoutABaselineTheSavingIsGross) {
  TempDir dir;
  write_file(dir.file("bench.jsonl"), kDedicated);
  const LaneValuation v = LaneValuation::load(lanes_on("", dir.file("bench.jsonl")), 2);
  nlohmann::json total = lanes_total();
  v.annotate(total, 10.0, 400.0, 2);
  EXPECT_TRUE(total["cost_saving"]["gross"].get<bool>());
  EXPECT_NEAR(total["cost_saving"]["fraction"].get<double>(), 4.0 / 20.0, 1e-12);
}

std::string load_error(const TrainOptions& o, int world = 2) {
  try {
    LaneValuation::load(o, world);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(LaneValuation, BadFilesNameTheFileLineAndWhatWasExpected) {
  TempDir dir;
  write_file(dir.file("off.json"), kBaseline);
  write_file(dir.file("bench.jsonl"), kDedicated);
  const std::string off = dir.file("off.json"), bench = dir.file("bench.jsonl");
  EXPECT_EQ(load_error(lanes_on(dir.file("absent.json"), "")),
            dir.file("absent.json") + ": cannot open the file named by [lanes] baseline");
  write_file(dir.file("garbage.json"), "{not json");
  EXPECT_NE(load_error(lanes_on(dir.file("garbage.json"), "")).find(dir.file("garbage.json") + ": [lanes] baseline expects a JSON file"),
            std::string::npos);
  write_file(dir.file("nosteps.json"), R"({"train_seconds": 3})");
  EXPECT_NE(load_error(lanes_on(dir.file("nosteps.json"), "")).find("has no number 'step_ms_median'"), std::string::npos);
  TrainOptions longer = lanes_on(off, "");
  longer.train.steps = 30;
  EXPECT_EQ(load_error(longer), off + ": the baseline ran 20 steps, this run [train] steps = 30 (the overhead compares equal runs)");
  EXPECT_EQ(load_error(lanes_on(off, ""), 4), off + ": the baseline ran on 2 ranks, this run on 4");
  write_file(dir.file("on.json"), R"({"steps": 20, "train_seconds": 10.0, "step_ms_median": 400.0, "lanes": {"total": {}}})");
  EXPECT_EQ(load_error(lanes_on(dir.file("on.json"), "")),
            dir.file("on.json") + ": the baseline ran with lanes on; give the summary.json of a lanes-off run");

  write_file(dir.file("one.jsonl"), "{\"lane\": \"pagerank\", \"units_per_s\": 3}\n");
  EXPECT_EQ(load_error(lanes_on("", dir.file("one.jsonl"))),
            dir.file("one.jsonl") + ": no dedicated throughput for lane imageproc (append `pipelane lane-bench imageproc --json` to it)");
  write_file(dir.file("bad.jsonl"), "{\"lane\": \"pagerank\", \"units_per_s\": 3}\nlane-bench output\n");
  EXPECT_EQ(load_error(lanes_on("", dir.file("bad.jsonl"))),
            dir.file("bad.jsonl") + ":2: expected one JSON object per line, as `pipelane lane-bench NAME --json` prints");
  write_file(dir.file("zero.jsonl"), "{\"lane\": \"pagerank\", \"units_per_s\": 0}\n");
  EXPECT_NE(load_error(lanes_on("", dir.file("zero.jsonl"))).find(":1: lane pagerank has units_per_s = 0"), std::string::npos);
  EXPECT_EQ(load_error(lanes_on(off, bench)), "(no error)");
}

}  // namespace
}  // namespace pipelane
