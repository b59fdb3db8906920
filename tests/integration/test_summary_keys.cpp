// A run today writes the summary.json a run wrote before RunSummary existed: the same key paths,
// compared with the files in tests/trainer/run/summaries/ (written by the program before the type,
// see test_run_summary.cpp). Values are not compared here: the golden, parity, lanes-bit-identical
// and resume tests hold the numbers, and the timings differ run to run. The keys a run gains are
// "schema_version" (the type's version, which files from before do not carry), "memory" (each
// rank's predicted and measured arena, added by the memory model after the type; optional) and,
// in a lanes run, the interference estimate beside every overrun (issue #26: "interference" per
// rank, per stage and in total, "estimated_overhead_fraction" and its standard error in total),
// which must be there.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/integration/mpi_job.h"

namespace pipelane {
namespace {

using nlohmann::json;
using namespace test_support;

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// Every key path of an object, arrays by their first element ("stages[].busy_s"). Below a name the
// run chooses (a lane's name, a lane's own report), the paths are the run's, not the format's.
void key_paths(const json& j, const std::string& at, std::set<std::string>& out) {
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) {
      const std::string path = at.empty() ? key : at + "." + key;
      out.insert(path);
      const bool named_by_run = at.size() >= 6 && at.compare(at.size() - 6, 6, ".lanes") == 0;
      // Lists that are empty in a calm run (quarantines) have no element to compare; "straggler" is
      // null, or the straggler's description when the run's timing (a loaded machine) made one.
      if (named_by_run || key == "report" || key == "plan" || key == "calibrated_step_s" || key == "quarantined" ||
          key == "straggler")
        continue;
      key_paths(value, path, out);
    }
  } else if (j.is_array() && !j.empty()) {
    key_paths(j.front(), at + "[]", out);
  }
}

std::set<std::string> key_paths(const json& j) {
  std::set<std::string> out;
  key_paths(j, "", out);
  return out;
}

std::string listed(const std::set<std::string>& paths) {
  std::string s;
  for (const auto& p : paths) s += " " + p;
  return s;
}

// Added since the fixtures were written: the interference estimate's keys.
bool added_since(const std::string& path) {
  return path.find(".interference") != std::string::npos || path.find(".estimated_overhead_fraction") != std::string::npos;
}

void expect_same_keys(const json& before, json now, const std::set<std::string>& added = {}) {
  ASSERT_TRUE(now.contains("schema_version"));
  now.erase("schema_version");
  now.erase("memory");
  std::set<std::string> b = key_paths(now);
  for (const std::string& path : added) EXPECT_TRUE(b.count(path)) << "a run no longer writes " << path;
  std::erase_if(b, added_since);
  const std::set<std::string> a = key_paths(before);
  std::set<std::string> only_before, only_now;
  for (const auto& p : a)
    if (!b.count(p)) only_before.insert(p);
  for (const auto& p : b)
    if (!a.count(p)) only_now.insert(p);
  EXPECT_TRUE(only_before.empty()) << "keys a run no longer writes:" << listed(only_before);
  EXPECT_TRUE(only_now.empty()) << "keys a run writes that it did not before:" << listed(only_now);
}

std::string fixture(const std::string& name) {
  return std::string(PIPELANE_SOURCE_DIR) + "/tests/trainer/run/summaries/" + name + ".json";
}

TEST(SummaryKeys, OneProcessWritesTheKeysItWroteBeforeTheType) {
  TempDir dir;
  write_test_corpus(dir.file("data.h5"));
  write_file(dir.file("c.ini"), tiny_parallel_config(dir.file("data.h5")));
  const JobResult job =
      run_job(0, "--config " + dir.file("c.ini") + " --run.dir=" + dir.file("run") + " --train.eval_every=2",
              dir.file("run.log"));
  ASSERT_EQ(job.exit_code, 0) << job.output;
  expect_same_keys(read_json(fixture("train_single")), read_json(dir.file("run/summary.json")));
}

TEST(SummaryKeys, ALanesRunAtPp2WritesTheKeysItWroteBeforeTheType) {
  TempDir dir;
  write_test_corpus(dir.file("data.h5"));
  write_file(dir.file("c.ini"), tiny_parallel_config(dir.file("data.h5")));
  const JobResult job = run_job(2,
                                "--config " + dir.file("c.ini") + " --run.dir=" + dir.file("run") +
                                    " --parallel.pp=2 --train.eval_every=2 --lanes.enabled=pagerank,imageproc "
                                    "--lanes.profile_iterations=1",
                                dir.file("run.log"));
  ASSERT_EQ(job.exit_code, 0) << job.output;
  expect_same_keys(read_json(fixture("train_lanes_pp2")), read_json(dir.file("run/summary.json")),
                   {"lanes.total.interference", "lanes.total.interference.estimated_s",
                    "lanes.total.interference.stderr_s", "lanes.total.interference.control_gaps",
                    "lanes.total.interference.lane_gaps", "lanes.total.interference.control_every",
                    "lanes.total.estimated_overhead_fraction", "lanes.total.estimated_overhead_fraction_stderr",
                    "lanes.per_stage[].interference.estimated_s", "lanes.per_rank[].interference.control_gaps"});
}

}  // namespace
}  // namespace pipelane
