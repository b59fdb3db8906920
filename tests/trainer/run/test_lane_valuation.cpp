// LaneValuation: the overhead and FreeRide-style cost saving (gross and net, at the two devices'
// prices) written into summary.json, from a lanes-off run's summary.json and `pipelane lane-bench
// --json` lines; bad files stop the run before training with the file (and line) named.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "tests/datasets/test_files.h"
#include "trainer/run/lane_valuation.h"
#include "trainer/run/run_summary.h"
#include "trainer/config/train_options.h"

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

// A lanes-off run of 20 steps on pp 2 (trainer/run/run_summary.h: what summary.json holds).
RunSummary baseline_run() {
  RunSummary s;
  s.training.emplace();
  s.steps = 20;
  s.train_seconds = 10.0;
  s.step_ms_median = 400.0;
  s.parallel = {1, 1, 2, "1f1b", 1, 4};
  return s;
}
const std::string kBaseline = to_json(baseline_run()).dump();
const char* kDedicated =
    "{\"lane\": \"pagerank\", \"units_per_s\": 1000.0}\n\n{\"lane\": \"imageproc\", \"units_per_s\": 50.0}\n";

// Two lanes' totals over ranks; pagerank's calibration before training did 30 more edges, which
// the valuation leaves out (only work done while training ran is valued).
CombinedLaneSummary lanes_total() {
  CombinedLaneSummary total;
  total.bubble_s = 4.0;
  total.harvested_s = 3.0;
  total.lanes["pagerank"].units = 2030;
  total.lanes["pagerank"].calibration_units = 30;
  total.lanes["imageproc"].units = 100;
  return total;
}

nlohmann::json valued(const LaneValuation& v, double train_s, double step_ms) {
  const CombinedLaneSummary total = lanes_total();
  return valued_total_json(total, v.value(total, train_s, step_ms, 2));
}

TEST(LaneValuation, OverheadAndCostSavingFollowFreeRidesFormulas) {
  TempDir dir;
  write_file(dir.file("off.json"), kBaseline);
  write_file(dir.file("bench.jsonl"), kDedicated);
  const LaneValuation v = LaneValuation::load(lanes_on(dir.file("off.json"), dir.file("bench.jsonl")), 2);
  const nlohmann::json total = valued(v, 10.5, 410.0);
  EXPECT_NEAR(total["overhead"]["fraction"].get<double>(), 0.05, 1e-12);
  EXPECT_NEAR(total["overhead"]["step_median_fraction"].get<double>(), 0.025, 1e-12);
  // value = 2000/1000 + 100/50 = 4 device-s; extra = 2 ranks x 0.5 s = 1; training = 2 x 10 = 20.
  const nlohmann::json& c = total["cost_saving"];
  EXPECT_NEAR(c["value_device_s"].get<double>(), 4.0, 1e-12);
  EXPECT_NEAR(c["extra_device_s"].get<double>(), 1.0, 1e-12);
  EXPECT_NEAR(c["training_device_s"].get<double>(), 20.0, 1e-12);
  EXPECT_NEAR(c["gross_fraction"].get<double>(), 0.2, 1e-12);  // 4 / 20
  EXPECT_NEAR(c["net_fraction"].get<double>(), 0.15, 1e-12);   // (4 - 1) / 20
  EXPECT_NEAR(c["fraction"].get<double>(), 0.15, 1e-12);       // the net one, where known
  EXPECT_FALSE(c["gross"].get<bool>());
  // Prices not given: equal, and no currency amounts.
  EXPECT_EQ(c["price_ratio"].get<double>(), 1.0);
  EXPECT_TRUE(c["train_price_per_hour"].is_null());
  EXPECT_TRUE(c["value_cost"].is_null());
  EXPECT_NEAR(total["lanes"]["imageproc"]["units_per_train_s"].get<double>(), 100 / 10.5, 1e-12);
  EXPECT_NEAR(total["lanes"]["pagerank"]["units_per_train_s"].get<double>(), 2000 / 10.5, 1e-12);
  EXPECT_NEAR(total["lanes"]["imageproc"]["value_device_s"].get<double>(), 2.0, 1e-12);
  EXPECT_EQ(total["lanes"]["pagerank"]["units"].get<double>(), 2030);  // the lane's work stays whole
}

TEST(LaneValuation, PricesValueLaneWorkAtTheDedicatedDevicesPrice) {
  // FreeRide's pricing: lane work valued on an RTX 3080 at 0.18/h, training on RTX 6000 Ada at 0.99/h.
  TempDir dir;
  write_file(dir.file("off.json"), kBaseline);
  write_file(dir.file("bench.jsonl"), kDedicated);
  TrainOptions o = lanes_on(dir.file("off.json"), dir.file("bench.jsonl"));
  o.lanes.train_price_per_hour = 0.99;
  o.lanes.dedicated_price_per_hour = 0.18;
  const nlohmann::json c = valued(LaneValuation::load(o, 2), 10.5, 410.0)["cost_saving"];
  const double ratio = 0.18 / 0.99;
  EXPECT_NEAR(c["price_ratio"].get<double>(), ratio, 1e-15);
  EXPECT_NEAR(c["gross_fraction"].get<double>(), 4.0 * ratio / 20, 1e-12);
  EXPECT_NEAR(c["net_fraction"].get<double>(), (4.0 * ratio - 1.0) / 20, 1e-12);  // negative: not worth it here
  EXPECT_NEAR(c["value_cost"].get<double>(), 4.0 * 0.18 / 3600, 1e-15);
  EXPECT_NEAR(c["training_cost"].get<double>(), 20.0 * 0.99 / 3600, 1e-15);
  EXPECT_NEAR(c["extra_cost"].get<double>(), 1.0 * 0.99 / 3600, 1e-15);
  // The saving is (value cost - extra cost) / training cost, in any currency.
  EXPECT_NEAR(c["net_fraction"].get<double>(),
              (c["value_cost"].get<double>() - c["extra_cost"].get<double>()) / c["training_cost"].get<double>(), 1e-12);

  // Only the training device's price: lane work is priced the same, the fractions do not move.
  o.lanes.dedicated_price_per_hour = 0;
  const nlohmann::json same = valued(LaneValuation::load(o, 2), 10.5, 410.0)["cost_saving"];
  EXPECT_EQ(same["price_ratio"].get<double>(), 1.0);
  EXPECT_NEAR(same["gross_fraction"].get<double>(), 0.2, 1e-12);
  EXPECT_NEAR(same["value_cost"].get<double>(), 4.0 * 0.99 / 3600, 1e-15);
}

TEST(LaneValuation, WithoutInputsTheEntriesAreNullAndSayWhatWouldFillThem) {
  const LaneValuation v = LaneValuation::load(lanes_on("", ""), 2);
  const nlohmann::json total = valued(v, 10.5, 410.0);
  EXPECT_TRUE(total["overhead"].is_null());
  EXPECT_TRUE(total["cost_saving"].is_null());
  EXPECT_NE(total["overhead_needs"].get<std::string>().find("[lanes] baseline"), std::string::npos);
  EXPECT_NE(total["cost_saving_needs"].get<std::string>().find("[lanes] dedicated"), std::string::npos);
  EXPECT_TRUE(total["lanes"]["pagerank"]["value_device_s"].is_null());
}

TEST(LaneValuation, WithoutABaselineOnlyTheGrossSavingIsKnown) {
  TempDir dir;
  write_file(dir.file("bench.jsonl"), kDedicated);
  const LaneValuation v = LaneValuation::load(lanes_on("", dir.file("bench.jsonl")), 2);
  const nlohmann::json c = valued(v, 10.0, 400.0)["cost_saving"];
  EXPECT_TRUE(c["gross"].get<bool>());
  EXPECT_NEAR(c["gross_fraction"].get<double>(), 4.0 / 20.0, 1e-12);
  EXPECT_NEAR(c["fraction"].get<double>(), 4.0 / 20.0, 1e-12);
  EXPECT_TRUE(c["net_fraction"].is_null());
  EXPECT_TRUE(c["extra_device_s"].is_null());
}

// With an interference estimate (control gaps) the run tells its own cost: overrun plus
// interference, per pipeline replica, against the lanes-off time that implies; the net saving
// then exists without a baseline, marked estimated. A baseline's measured figures still win.
TEST(LaneValuation, WithAnInterferenceEstimateTheNetSavingIsEstimatedWithoutABaseline) {
  TempDir dir;
  write_file(dir.file("bench.jsonl"), kDedicated);
  CombinedLaneSummary total = lanes_total();
  total.overrun_s = 0.2;
  InterferenceEstimate& e = total.interference.emplace();
  e.control_every = 32;
  e.control_gaps = 20;
  e.compared_control_gaps = 20;
  e.lane_gaps = 600;
  e.compared_lane_gaps = 600;
  e.estimated = true;
  e.extra_s = 0.3;
  e.stderr_s = 0.1;
  const LaneValuation v = LaneValuation::load(lanes_on("", dir.file("bench.jsonl")), 2);
  // pp 2, one replica per stage: 0.5 s of 10.5 s is extra, so lanes off would have taken 10 s.
  const LanesValuation valued_run = v.value(total, 10.5, 400.0, 2, std::nullopt, 1);
  ASSERT_TRUE(valued_run.estimated_overhead);
  EXPECT_NEAR(valued_run.estimated_overhead->fraction(), 0.05, 1e-12);
  EXPECT_NEAR(valued_run.estimated_overhead->fraction_stderr(), 0.01, 1e-12);
  const nlohmann::json j = valued_total_json(total, valued_run);
  EXPECT_NEAR(j["estimated_overhead_fraction"].get<double>(), 0.05, 1e-12);
  EXPECT_NEAR(j["estimated_overhead_fraction_stderr"].get<double>(), 0.01, 1e-12);
  const nlohmann::json& c = j["cost_saving"];
  EXPECT_TRUE(c["estimated"].get<bool>());
  EXPECT_FALSE(c["gross"].get<bool>());
  EXPECT_NEAR(c["extra_device_s"].get<double>(), 1.0, 1e-12);      // 2 ranks x 0.5 s
  EXPECT_NEAR(c["training_device_s"].get<double>(), 20.0, 1e-12);  // 2 ranks x 10 s
  EXPECT_NEAR(c["net_fraction"].get<double>(), (4.0 - 1.0) / 20.0, 1e-12);
  // Two replicas per stage (dp 2) are delayed side by side: each stage's delay counts once.
  EXPECT_NEAR(v.value(total, 10.25, 400.0, 4, std::nullopt, 2).estimated_overhead->extra_train_s(), 0.25, 1e-12);

  // Not enough control gaps: no fraction (null), the saving gross only, not marked estimated.
  e.estimated = false;
  const nlohmann::json unknown = valued_total_json(total, v.value(total, 10.5, 400.0, 2, std::nullopt, 1));
  EXPECT_TRUE(unknown.contains("estimated_overhead_fraction"));
  EXPECT_TRUE(unknown["estimated_overhead_fraction"].is_null());
  EXPECT_TRUE(unknown["cost_saving"]["gross"].get<bool>());
  EXPECT_FALSE(unknown["cost_saving"].contains("estimated"));
  // A summary from before the estimate has neither key.
  EXPECT_FALSE(valued(v, 10.0, 400.0).contains("estimated_overhead_fraction"));

  // With a baseline the extra time is measured, whatever the estimate says.
  e.estimated = true;
  write_file(dir.file("off.json"), kBaseline);
  const LaneValuation measured = LaneValuation::load(lanes_on(dir.file("off.json"), dir.file("bench.jsonl")), 2);
  const nlohmann::json m = valued_total_json(total, measured.value(total, 10.5, 400.0, 2, std::nullopt, 1));
  EXPECT_FALSE(m["cost_saving"].contains("estimated"));
  EXPECT_NEAR(m["cost_saving"]["extra_device_s"].get<double>(), 1.0, 1e-12);
  EXPECT_NEAR(m["estimated_overhead_fraction"].get<double>(), 0.05, 1e-12);  // both, side by side
}

TEST(LaneValuation, PerStageEntriesValueOnlyTheirLanes) {
  TempDir dir;
  write_file(dir.file("bench.jsonl"), kDedicated);
  const LaneValuation v = LaneValuation::load(lanes_on("", dir.file("bench.jsonl")), 2);
  const CombinedLaneSummary stage = lanes_total();
  const nlohmann::json j = valued_lanes_json(stage, v.value_lanes(stage, 10.0));
  EXPECT_NEAR(j["lanes"]["pagerank"]["value_device_s"].get<double>(), 2.0, 1e-12);
  EXPECT_FALSE(j.contains("cost_saving"));
  EXPECT_FALSE(j.contains("overhead"));
}

TEST(LaneValuation, StepQuartilesSkipTheWarmUpAndInterpolate) {
  // Two warm-up steps left out, then 1..8 ms: quartiles at 2.75 and 6.25 (numpy's linear rule).
  const auto q = steady_step_quartiles({900, 800, 8, 1, 7, 2, 6, 3, 5, 4});
  ASSERT_TRUE(q);
  EXPECT_DOUBLE_EQ(q->p25_ms, 2.75);
  EXPECT_DOUBLE_EQ(q->p75_ms, 6.25);
  EXPECT_FALSE(steady_step_quartiles({5, 5, 5, 5, 5}));  // 3 steady steps: too few to tell a spread
}

// With the baseline's metrics.jsonl beside its summary.json, the overhead carries both runs' spread
// and says whether the difference lies inside it; net above gross says why.
TEST(LaneValuation, OverheadIsJudgedAgainstBothRunsStepTimeSpread) {
  TempDir dir;
  write_file(dir.file("off.json"), kBaseline);
  write_file(dir.file("bench.jsonl"), kDedicated);
  std::string metrics;
  // Steady steps 380..420 ms (IQR 20 ms = 5% of the 400 ms median); val_loss rows have no step_ms.
  for (int i = 0; i < 20; ++i)
    metrics += "{\"step\": " + std::to_string(i + 1) + ", \"step_ms\": " + std::to_string(i < 2 ? 2000 : 380 + 40 * ((i * 7) % 18) / 17) + "}\n";
  metrics += "{\"step\": 20, \"val_loss\": 3.5}\n";
  write_file(dir.file("metrics.jsonl"), metrics);
  const LaneValuation v = LaneValuation::load(lanes_on(dir.file("off.json"), dir.file("bench.jsonl")), 2);
  ASSERT_TRUE(v.baseline()->step_quartiles);
  const double baseline_iqr = v.baseline()->step_quartiles->iqr_ms();
  EXPECT_GT(baseline_iqr, 10);
  EXPECT_LT(baseline_iqr, 30);
  const CombinedLaneSummary total = lanes_total();
  // 1% faster with lanes: inside the noise, and net above gross for that reason only.
  const LanesValuation faster = v.value(total, 9.9, 396.0, 2, StepQuartiles{390, 402});
  ASSERT_TRUE(faster.overhead->inside_noise());
  EXPECT_TRUE(*faster.overhead->inside_noise());
  EXPECT_NEAR(*faster.overhead->noise_fraction(), baseline_iqr / 400.0, 1e-12);
  EXPECT_TRUE(faster.cost_saving->net_above_gross());
  EXPECT_GT(*faster.cost_saving->net_fraction(), faster.cost_saving->gross_fraction());
  const nlohmann::json j = valued_total_json(total, faster)["overhead"];
  EXPECT_EQ(j["step_ms_p25"].get<double>(), 390);
  EXPECT_EQ(j["step_ms_p75"].get<double>(), 402);
  EXPECT_TRUE(j["inside_noise"].get<bool>());
  // 20% slower: outside it.
  const LanesValuation slower = v.value(total, 12.0, 480.0, 2, StepQuartiles{470, 490});
  EXPECT_FALSE(*slower.overhead->inside_noise());
  EXPECT_FALSE(slower.cost_saving->net_above_gross());
  // Without the lanes run's spread the noise is unknown, and summary.json has no such keys.
  const LanesValuation unknown = v.value(total, 12.0, 480.0, 2);
  EXPECT_FALSE(unknown.overhead->inside_noise());
  EXPECT_FALSE(valued_total_json(total, unknown)["overhead"].contains("inside_noise"));
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
  EXPECT_EQ(load_error(lanes_on(dir.file("garbage.json"), "")).rfind(dir.file("garbage.json") + ": not JSON (", 0), 0u);
  nlohmann::json no_median = to_json(baseline_run());
  no_median.erase("step_ms_median");
  write_file(dir.file("nomedian.json"), no_median.dump());
  EXPECT_EQ(load_error(lanes_on(dir.file("nomedian.json"), "")),
            dir.file("nomedian.json") + ": cannot read 'step_ms_median': missing");
  TrainOptions longer = lanes_on(off, "");
  longer.train.steps = 30;
  EXPECT_EQ(load_error(longer), off + ": the baseline ran 20 steps, this run [train] steps = 30 (the overhead compares equal runs)");
  EXPECT_EQ(load_error(lanes_on(off, ""), 4), off + ": the baseline ran on 2 ranks, this run on 4");
  RunSummary on = baseline_run();
  on.lanes.emplace();
  write_file(dir.file("on.json"), to_json(on).dump());
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

TEST(LaneValuation, ADedicatedPriceNeedsTheTrainingPrice) {
  const char* argv[] = {"train", "--lanes.enabled=pagerank", "--lanes.dedicated_price_per_hour=0.18"};
  try {
    parse_train_options(3, argv);
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("[lanes] dedicated_price_per_hour needs train_price_per_hour"), std::string::npos)
        << e.what();
  }
  const char* both[] = {"train", "--lanes.enabled=pagerank", "--lanes.dedicated_price_per_hour=0.18",
                        "--lanes.train_price_per_hour=0.99"};
  EXPECT_EQ(parse_train_options(4, both).lanes.dedicated_price_per_hour, 0.18);
}

}  // namespace
}  // namespace pipelane
