// A profiled run's interference estimate becomes the simulator's CPU interference parameter
// (trainer/sim/sim_inputs.h: RunProfile::lane_gap_delay_s): per gap left to the lanes, as the
// control gaps measured it; a negative estimate (noise) is taken as 0 and says so; a run without an
// estimate gives none. The simulated job keeps the config's memory features.
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "lanes/lane_summary.h"
#include "tests/datasets/test_files.h"
#include "trainer/config/train_options.h"
#include "trainer/sim/sim_inputs.h"

namespace pipelane {
namespace {

using nlohmann::json;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A run directory: configs/pp2.ini and a pp 2 lanes run's summary, with `estimate` as its total
// interference (none: the summary as written before the estimate existed).
RunProfile profile_with(const test_support::TempDir& dir, const std::optional<InterferenceEstimate>& estimate) {
  const std::string source = PIPELANE_SOURCE_DIR;
  test_support::write_file(dir.file("config.ini"), read_text(source + "/configs/pp2.ini"));
  json summary = json::parse(read_text(source + "/tests/trainer/run/summaries/train_lanes_pp2.json"));
  if (estimate) summary["lanes"]["total"]["interference"] = to_json(*estimate);
  test_support::write_file(dir.file("summary.json"), summary.dump());
  return load_run_profile(dir.path().string());
}

InterferenceEstimate estimate(double extra_s, double stderr_s) {
  InterferenceEstimate e;
  e.control_every = 32;
  e.control_gaps = 20;
  e.lane_gaps = 400;
  e.compared_lane_gaps = 380;
  e.compared_control_gaps = 20;
  e.estimated = true;
  e.extra_s = extra_s;
  e.stderr_s = stderr_s;
  return e;
}

TEST(SimInputs, AProfiledRunsInterferenceIsTheDelayPerLaneGap) {
  test_support::TempDir dir;
  const RunProfile run = profile_with(dir, estimate(0.2, 0.08));
  EXPECT_DOUBLE_EQ(run.lane_gap_delay_s, 0.2 / 400);
  EXPECT_NE(run.lane_gap_delay_source.find("measured in " + dir.path().string()), std::string::npos) << run.lane_gap_delay_source;
  EXPECT_NE(run.lane_gap_delay_source.find("0.5 +- 0.2 ms per lane gap (400 lane gaps, 20 control gaps)"),
            std::string::npos)
      << run.lane_gap_delay_source;
}

TEST(SimInputs, ANegativeEstimateIsTakenAsZeroAndSaysSo) {
  test_support::TempDir dir;
  const RunProfile run = profile_with(dir, estimate(-0.1, 0.3));
  EXPECT_DOUBLE_EQ(run.lane_gap_delay_s, 0.0);
  EXPECT_NE(run.lane_gap_delay_source.find("-0.25 +- 0.75 ms per lane gap"), std::string::npos) << run.lane_gap_delay_source;
  EXPECT_NE(run.lane_gap_delay_source.find("negative: taken as 0"), std::string::npos);
}

// What `pipelane simulate` and `plan` simulate is the config's job, memory features included:
// bf16 GEMM weights under the distributed optimizer shard the masters there as in the run.
TEST(SimInputs, TheJobKeepsTheConfigsMemoryFeatures) {
  const std::string config = std::string(PIPELANE_SOURCE_DIR) + "/configs/tiny.ini";
  const auto job_of = [&](std::vector<std::string> extra) {
    std::vector<std::string> args{"train", "--config", config, "--parallel.dp=2", "--train.global_batch=32",
                                  "--train.precision=bf16"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    return job_from_options(parse_train_options(static_cast<int>(argv.size()), argv.data()), 2);
  };
  const sim::JobSpec plain = job_of({});
  EXPECT_EQ(plain.gemm_weights, DType::F32);
  EXPECT_FALSE(plain.masters_sharded());
  const sim::JobSpec sharded = job_of({"--train.distributed_optimizer=true", "--train.gemm_weights=bf16"});
  EXPECT_TRUE(sharded.distributed_optimizer);
  EXPECT_EQ(sharded.gemm_weights, DType::BF16);
  EXPECT_TRUE(sharded.masters_sharded());
  EXPECT_EQ(sharded.dp, 2);
}

TEST(SimInputs, NoEstimateNoParameter) {
  test_support::TempDir dir;
  const RunProfile without = profile_with(dir, std::nullopt);
  EXPECT_DOUBLE_EQ(without.lane_gap_delay_s, 0.0);
  EXPECT_TRUE(without.lane_gap_delay_source.empty());
  InterferenceEstimate too_few = estimate(0.2, 0.08);
  too_few.estimated = false;
  test_support::TempDir dir2;
  EXPECT_TRUE(profile_with(dir2, too_few).lane_gap_delay_source.empty());
}

}  // namespace
}  // namespace pipelane
