// summary.json as a type (trainer/run/run_summary.h). The files in summaries/ were written by
// pipelane before RunSummary existed (runs of the bit-identity set: one process, a resumed run, a
// pp 2 run with lanes, one with lanes on stage 1 only valued against a baseline at two prices, and
// two simulations, one with lanes and a service lane; paths shortened to runs/...): each parses
// and writes back the same JSON, field by field and byte for byte. Whatever does not read is one
// line naming the file and the key.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/datasets/test_files.h"
#include "trainer/run/run_summary.h"

namespace pipelane {
namespace {

using nlohmann::json;
using test_support::TempDir;
using test_support::write_file;

std::string fixture(const std::string& name) {
  return std::string(PIPELANE_SOURCE_DIR) + "/tests/trainer/run/summaries/" + name + ".json";
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Every key path where `a` and `b` differ ("lanes.total.bubble_s: 0.5 vs 0.25").
void differences(const json& a, const json& b, const std::string& path, std::vector<std::string>& out) {
  if (a.is_object() && b.is_object()) {
    for (const auto& [key, value] : a.items()) {
      const std::string at = path.empty() ? key : path + "." + key;
      if (!b.contains(key)) out.push_back(at + ": only in the file");
      else differences(value, b[key], at, out);
    }
    for (const auto& [key, value] : b.items())
      if (!a.contains(key)) out.push_back((path.empty() ? key : path + "." + key) + ": only when written back");
    return;
  }
  if (a.is_array() && b.is_array() && a.size() == b.size()) {
    for (std::size_t i = 0; i < a.size(); ++i) differences(a[i], b[i], path + "[" + std::to_string(i) + "]", out);
    return;
  }
  // As written: 1 and 1.0 differ, a signed and an unsigned 1 do not.
  if (a.dump() != b.dump()) out.push_back(path + ": " + a.dump() + " in the file, " + b.dump() + " written back");
}

class SummaryFile : public testing::TestWithParam<const char*> {};

TEST_P(SummaryFile, ParsesAndWritesBackTheSameJson) {
  const std::string path = fixture(GetParam());
  const std::string text = read_text(path);
  ASSERT_FALSE(text.empty()) << path;
  const RunSummary summary = read_run_summary(path);
  const json written = to_json(summary);
  std::vector<std::string> diffs;
  differences(json::parse(text), written, "", diffs);
  for (const std::string& d : diffs) ADD_FAILURE() << path << ": " << d;
  // The writers' format: two-space indentation and a newline (trainer/run/run_directory.h).
  EXPECT_EQ(written.dump(2) + "\n", text) << path;
}

INSTANTIATE_TEST_SUITE_P(WrittenBeforeTheType, SummaryFile,
                         testing::Values("train_single", "train_resumed", "train_lanes_pp2", "train_lanes_valued",
                                         "sim_profile_pp2", "sim_lanes_pp2"));

TEST(RunSummary, TheFilesReadIntoTheirParts) {
  const RunSummary single = read_run_summary(fixture("train_single"));
  ASSERT_TRUE(single.training);
  EXPECT_FALSE(single.simulation);
  EXPECT_FALSE(single.lanes);
  EXPECT_EQ(single.steps, 6);
  EXPECT_EQ(single.parallel.world(), 1);
  EXPECT_EQ(single.evals.size(), 2u);
  EXPECT_TRUE(single.training->unigram_val_loss);

  const RunSummary resumed = read_run_summary(fixture("train_resumed"));
  EXPECT_EQ(resumed.resumed_from_step, 3);
  EXPECT_EQ(resumed.training->first_step, 4);

  const RunSummary lanes = read_run_summary(fixture("train_lanes_pp2"));
  ASSERT_TRUE(lanes.lanes);
  ASSERT_EQ(lanes.lanes->per_rank.size(), 2u);
  ASSERT_TRUE(lanes.lanes->per_rank[1]);
  EXPECT_EQ(lanes.lanes->per_rank[1]->stage, 1);
  EXPECT_EQ(lanes.lanes->per_stage.size(), 2u);
  EXPECT_TRUE(lanes.training->straggler);
  EXPECT_EQ(lanes.lanes->total.lanes.at("pagerank").work_unit, "edges");

  const RunSummary valued = read_run_summary(fixture("train_lanes_valued"));
  ASSERT_TRUE(valued.lanes);
  EXPECT_FALSE(valued.lanes->per_rank[0]) << "lanes ran on stage 1 only";
  ASSERT_TRUE(valued.lanes->valuation.overhead);
  ASSERT_TRUE(valued.lanes->valuation.cost_saving);
  EXPECT_EQ(valued.lanes->valuation.cost_saving->price_ratio, 0.5);

  const RunSummary sim = read_run_summary(fixture("sim_lanes_pp2"));
  ASSERT_TRUE(sim.simulation);
  EXPECT_FALSE(sim.training);
  ASSERT_TRUE(sim.simulated_lanes);
  ASSERT_TRUE(sim.simulated_lanes->requests);
  EXPECT_GT(sim.simulated_lanes->requests->served, 0u);
  ASSERT_EQ(sim.stages.size(), 2u);
  ASSERT_TRUE(sim.stages[0].simulated);
  EXPECT_EQ(sim.stages[0].simulated->idle_by_kind_s.size(), 4u);
}

// What only a hand-built summary has: a NaN loss, a quarantined lane in a simulation, no straggler stage.
TEST(RunSummary, ValuesNoRunOfTheSetHasWriteBackToo) {
  RunSummary sim = read_run_summary(fixture("sim_lanes_pp2"));
  sim.simulated_lanes->per_stage[1].totals.quarantined.push_back({"pagerank", 1, "2 steps in a row took more"});
  const RunSummary sim_back = run_summary_from_json(json::parse(to_json(sim).dump()), "sim");
  EXPECT_EQ(to_json(sim_back).dump(), to_json(sim).dump());
  ASSERT_EQ(sim_back.simulated_lanes->per_stage[1].totals.quarantined.size(), 1u);

  RunSummary run = read_run_summary(fixture("train_lanes_pp2"));
  run.final_loss = std::nan("");
  run.training->unigram_val_loss = std::nan("");
  run.training->straggler->stage = -1;
  run.training->traced_steps.reset();
  const json written = json::parse(to_json(run).dump());  // NaN is written as null
  EXPECT_TRUE(written["final_loss"].is_null());
  EXPECT_TRUE(written["straggler"]["stage"].is_null());
  EXPECT_TRUE(written["traced_steps"].is_null());
  EXPECT_TRUE(written.contains("unigram_val_loss") && written["unigram_val_loss"].is_null());
  const RunSummary back = run_summary_from_json(written, "run");
  EXPECT_FALSE(back.final_loss);
  EXPECT_EQ(back.training->straggler->stage, -1);
  EXPECT_EQ(to_json(back).dump(), written.dump());
}

// "memory": each rank's predicted and measured arena bytes, written and read back; files written
// before it (the fixtures) have none and write none.
TEST(RunSummary, ArenaMemoryRoundTrips) {
  RunSummary run = read_run_summary(fixture("train_lanes_pp2"));
  EXPECT_TRUE(run.training->memory.empty());
  EXPECT_FALSE(json::parse(to_json(run).dump()).contains("memory"));
  run.training->memory = {{0, 0, 0, 0, 1360896, 1360896}, {1, 1, 0, 0, 123456789012, 123456789000}};
  const json written = json::parse(to_json(run).dump());
  ASSERT_EQ(written["memory"].size(), 2u);
  EXPECT_EQ(written["memory"][1]["predicted_bytes"].get<std::uint64_t>(), 123456789012u);
  const RunSummary back = run_summary_from_json(written, "run");
  ASSERT_EQ(back.training->memory.size(), 2u);
  EXPECT_EQ(back.training->memory[1].stage, 1);
  EXPECT_EQ(back.training->memory[1].high_water_bytes, 123456789000.0);
  EXPECT_EQ(to_json(back).dump(), written.dump());
}

std::string parse_error(const json& j);  // below, with the other errors

// "interference" (per rank, per stage, total) and the estimated overhead derived from it, written
// and read back; the fixtures, from before it, have none and write none.
TEST(RunSummary, TheInterferenceEstimateRoundTrips) {
  RunSummary run = read_run_summary(fixture("train_lanes_pp2"));
  EXPECT_FALSE(json::parse(to_json(run).dump())["lanes"]["total"].contains("interference"));
  EXPECT_FALSE(json::parse(to_json(run).dump())["lanes"]["total"].contains("estimated_overhead_fraction"));
  InterferenceEstimate e;
  e.control_every = 32;
  e.control_gaps = 11;
  e.lane_gaps = 90;
  e.compared_lane_gaps = 80;
  e.compared_control_gaps = 10;
  e.estimated = true;
  e.extra_s = 0.0123456789;
  e.stderr_s = 0.004;
  run.lanes->per_rank[0]->interference = e;
  run.lanes->per_stage[0].lanes.interference = e;
  run.lanes->total.interference = e;
  run.lanes->valuation.estimated_overhead =
      estimate_overhead(run.lanes->total, run.train_seconds, run.parallel.tp * run.parallel.dp);
  const json written = json::parse(to_json(run).dump());
  EXPECT_DOUBLE_EQ(written["lanes"]["total"]["interference"]["estimated_s"].get<double>(), 0.0123456789);
  EXPECT_TRUE(written["lanes"]["total"]["estimated_overhead_fraction"].is_number());
  EXPECT_DOUBLE_EQ(written["lanes"]["per_rank"][0]["interference"]["stderr_s"].get<double>(), 0.004);
  const RunSummary back = run_summary_from_json(written, "run");
  ASSERT_TRUE(back.lanes->valuation.estimated_overhead);
  EXPECT_EQ(to_json(back).dump(), written.dump());
  json bad = written;
  bad["lanes"]["total"]["interference"]["control_gaps"] = "many";
  EXPECT_EQ(parse_error(bad), "runs/a/summary.json: cannot read 'lanes.total.interference': lane summary: "
                                 "'control_gaps' has the wrong type");
}

std::string parse_error(const json& j) {
  try {
    run_summary_from_json(j, "runs/a/summary.json");
  } catch (const SummaryError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(RunSummary, WhatDoesNotReadIsOneLineNamingTheFileAndTheKey) {
  const json good = json::parse(read_text(fixture("train_lanes_pp2")));
  json missing = good;
  missing.erase("step_ms_median");
  EXPECT_EQ(parse_error(missing), "runs/a/summary.json: cannot read 'step_ms_median': missing");
  json wrong = good;
  wrong["parallel"]["pp"] = "two";
  EXPECT_EQ(parse_error(wrong), "runs/a/summary.json: cannot read 'parallel.pp': a string, not an integer");
  json nested = good;
  nested["lanes"]["total"]["lanes"]["pagerank"].erase("lane_s");
  EXPECT_EQ(parse_error(nested), "runs/a/summary.json: cannot read 'lanes.total.lanes.pagerank.lane_s': missing");
  json rank = good;
  rank["lanes"]["per_rank"][1]["lanes"] = 3;
  EXPECT_EQ(parse_error(rank),
            "runs/a/summary.json: cannot read 'lanes.per_rank[1]': lane summary: 'lanes' is not an object");
  json newer = good;
  newer["schema_version"] = kRunSummarySchemaVersion + 1;
  EXPECT_EQ(parse_error(newer), "runs/a/summary.json: cannot read 'schema_version': version " +
                                    std::to_string(kRunSummarySchemaVersion + 1) + "; this pipelane reads versions 1 to " +
                                    std::to_string(kRunSummarySchemaVersion));
  json stated = good;
  stated["schema_version"] = 1;
  EXPECT_EQ(parse_error(stated), "(no error)");
  EXPECT_EQ(parse_error(json::array()), "runs/a/summary.json: not a run's summary.json (a list, not an object)");

  TempDir dir;
  write_file(dir.file("cut.json"), "{\"steps\": 3,");
  try {
    read_run_summary(dir.file("cut.json"));
    FAIL() << "read";
  } catch (const SummaryError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(dir.file("cut.json") + ": not JSON (", 0), 0u) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  }
  EXPECT_THROW(read_run_summary(dir.file("absent.json")), SummaryError);
}

}  // namespace
}  // namespace pipelane

namespace pipelane {
namespace {

// A summary written now says its version; one read from a file of version 1 (no key) is written
// back without it, so old files keep their bytes.
TEST(RunSummarySchema, NewSummariesCarryTheirVersionOldOnesKeepTheirBytes) {
  const RunSummary old = read_run_summary(fixture("train_single"));  // written before the key
  EXPECT_EQ(old.schema_version, 1);
  EXPECT_FALSE(to_json(old).contains("schema_version"));
  RunSummary fresh = old;
  fresh.schema_version = RunSummary{}.schema_version;  // what a run fills in now
  EXPECT_EQ(fresh.schema_version, kRunSummarySchemaVersion);
  const nlohmann::json written = to_json(fresh);
  EXPECT_EQ(written.value("schema_version", 0), kRunSummarySchemaVersion);
  EXPECT_EQ(run_summary_from_json(written, "x").schema_version, kRunSummarySchemaVersion);
}

}  // namespace
}  // namespace pipelane
