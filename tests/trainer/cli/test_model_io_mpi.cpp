// Across ranks (mpirun): [run] init_from at other grids, the model gathered for samples during
// pipeline- and tensor-parallel training, and the report of a real pipeline run with lanes,
// loaded in headless Chromium.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/integration/mpi_job.h"
#include "tests/trainer/support/headless_browser.h"

namespace pipelane {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test_support::JobResult;
using test_support::run_job;
using test_support::TempDir;
using test_support::write_file;

std::string base_config(const std::string& dir) {
  return test_support::tiny_parallel_config(dir + "/data.h5") + "dir = " + dir + "/run\n";
}

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(ModelIoMpi, InitFromLoadsAtAnyGridAndSamplesGatherTheWholeModel) {
  TempDir tmp;
  const std::string d = tmp.path().string();
  test_support::write_test_corpus(d + "/data.h5");
  write_file(d + "/c.ini", base_config(d));
  // A trained checkpoint to start from (one process).
  JobResult r = run_job(0, "--config " + d + "/c.ini --run.dir=" + d + "/src --run.checkpoint_every=5", d + "/src.log");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string from = d + "/src/checkpoints/step_00000005";
  // The same fine-tuning in one process, at pp 2 and at tp 2 x pp 2; samples at step 4 from the
  // model gathered on rank 0, and a checkpoint of the same step.
  const std::string common = " --config " + d + "/c.ini --run.init_from=" + from +
                             " --train.steps=4 --train.sample_every=4 --train.sample_tokens=16"
                             " --train.sample_prompt=pipeline --run.checkpoint_every=4";
  struct Grid {
    int ranks;
    std::string args, dir;
  } grids[] = {{0, "", d + "/one"}, {2, " --parallel.pp=2", d + "/pp2"}, {4, " --parallel.pp=2 --parallel.tp=2", d + "/tp2pp2"}};
  std::vector<std::vector<double>> losses;
  for (const Grid& g : grids) {
    r = run_job(g.ranks, common + g.args + " --run.dir=" + g.dir, g.dir + ".log");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("initialised from " + from), std::string::npos) << r.output;
    losses.push_back(test_support::read_metrics(g.dir).loss);
  }
  // Every grid trains the same model from the same weights (parallel equivalence: 1e-5).
  ASSERT_EQ(losses[0].size(), 4u);
  for (std::size_t g = 1; g < losses.size(); ++g)
    for (std::size_t i = 0; i < losses[0].size(); ++i) EXPECT_NEAR(losses[g][i], losses[0][i], 1e-5) << g << " " << i;
  // The sample of a pipeline- and tensor-parallel run came from the whole model: `generate` on the
  // checkpoint of the same step, with the samples' settings and seed (train seed 7 + step 4),
  // draws the same tokens.
  for (const Grid& g : grids) {
    std::ifstream in(g.dir + "/samples.jsonl");
    std::string line;
    ASSERT_TRUE(std::getline(in, line)) << g.dir;
    const json sample = json::parse(line);
    const std::string out = d + "/gen.json";
    const std::string cmd = test_support::build_dir() + "/pipelane generate --model " + g.dir +
                            "/checkpoints/step_00000004 --prompt pipeline --tokens 16 --temperature 1 --top-k 200"
                            " --top-p 1 --seed 11 --threads 1 --json > " + out + " 2>/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    EXPECT_EQ(json::parse(std::ifstream(out))["tokens"], sample["tokens"]) << g.dir;
  }
}

TEST(ModelIoMpi, ReportOfAPipelineRunWithLanesLoadsInChromium) {
  TempDir tmp;
  const std::string d = tmp.path().string();
  test_support::write_test_corpus(d + "/data.h5");
  write_file(d + "/c.ini", base_config(d));
  const JobResult r = run_job(2, "--config " + d + "/c.ini --parallel.pp=2 --train.steps=6 --train.eval_every=3"
                                 " --lanes.enabled=pagerank --lane.pagerank.generate=rmat --lane.pagerank.scale=10",
                              d + "/train.log");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string out = test_support::test_output_dir("ReportOfAPipelineRun");
  const std::string page = out + "/report.html";
  const std::string cmd = test_support::build_dir() + "/pipelane report " + d + "/run --output " + page + " > " + d +
                          "/report.log 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << test_support::slurp(d + "/report.log");
  const std::string html = test_support::slurp(page);
  EXPECT_NE(html.find("id=\"timeline-0\""), std::string::npos);
  EXPECT_EQ(count(html, "<text x=\"112.00\""), 2) << "one timeline row label per rank";
  EXPECT_GT(count(html, "class=\"box Fwd\""), 0);
  EXPECT_GT(count(html, "class=\"box wait-"), 0);
  const std::string chromium = test_support::find_chromium();
  if (chromium.empty()) GTEST_SKIP() << "chromium not installed (scripts/setup.sh installs Debian's chromium)";
  const test_support::BrowserResult b = test_support::load_in_chromium(chromium, page, d, out + "/report.png");
  ASSERT_EQ(b.exit_code, 0) << b.log;
  EXPECT_TRUE(b.console_messages.empty()) << b.console_messages.front();
  EXPECT_NE(b.dom.find("data-rendered=\"yes\""), std::string::npos);
  for (const char* id : {"chart-loss", "chart-tokens", "chart-mfu", "stages-0", "lanes-0", "timeline-0"})
    EXPECT_NE(b.dom.find(std::string("id=\"") + id + "\""), std::string::npos) << id;
}

}  // namespace
}  // namespace pipelane
