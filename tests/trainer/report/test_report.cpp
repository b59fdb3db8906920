// `pipelane report` (trainer/report_*.h): run directories read into typed values, the page's
// charts, and the page loaded in headless Chromium (no console message, charts and timeline there).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/datasets/test_files.h"
#include "tests/trainer/support/headless_browser.h"
#include "trainer/cli/report_command.h"
#include "trainer/report/report_data.h"
#include "trainer/report/report_html.h"
#include "trainer/report/report_svg.h"
#include "trainer/run/run_summary.h"

namespace pipelane {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test_support::TempDir;
using test_support::write_file;

// Two stages of pagerank: 1.5 s harvested of 2 s of waits on stage 0, 0.2 s of 1 s on stage 1.
CombinedLaneSummary pagerank_lanes(double bubble_s, double harvested_s, double overrun_s, double units, double lane_s,
                                   long steps) {
  CombinedLaneSummary c;
  c.bubble_s = bubble_s;
  c.harvested_s = harvested_s;
  c.overrun_s = overrun_s;
  c.lanes["pagerank"] = {"edges", units, steps, lane_s, 0, harvested_s, overrun_s};
  return c;
}

// A finished 2-stage run's summary.json (trainer/run/run_summary.h) with a straggler and lanes.
RunSummary run_summary(int steps) {
  RunSummary s;
  s.steps = steps;
  s.tokens = 1024.0 * steps;
  s.train_seconds = 0.02 * steps;
  s.tokens_per_s = 1010.0;
  s.mfu = 0.12;
  s.final_loss = 1.5;
  s.final_val_loss = 1.6;
  s.parallel = {1, 1, 2, "1f1b", 1, 2};
  s.bubble_fraction_measured = 0.4;
  s.bubble_fraction_theoretical = 0.33;
  TrainingPart& t = s.training.emplace();
  t.mfu_sgemm = 0.3;
  t.peak_source = "the hardware peak";
  t.unigram_val_loss = 3.0;
  t.straggler = StragglerReport{1, 0, 0, 0, {}, {}, "stage 1 is the straggler"};
  TrainingLanes& lanes = s.lanes.emplace();
  const std::map<std::string, LaneValue> unvalued = {{"pagerank", LaneValue{}}};  // no [lanes] dedicated
  lanes.total = pagerank_lanes(3.0, 1.7, 0.01, 340.0, 1.8, 140);
  lanes.valuation.lanes = unvalued;
  lanes.per_stage = {{pagerank_lanes(2.0, 1.5, 0.01, 300.0, 1.6, 120), unvalued},
                     {pagerank_lanes(1.0, 0.2, 0.0, 40.0, 0.2, 20), unvalued}};
  return s;
}

// A finished 2-stage run with lanes, as the trainer writes it: `steps` metrics rows with a
// validation row every 10 steps, a summary, and a trace of two steps on two ranks in which
// stage 0 waits 4 ms (Cooldown) and runs two pagerank steps in that wait.
void write_run(const fs::path& dir, int steps, double loss0) {
  fs::create_directories(dir);
  std::string metrics;
  for (int s = 1; s <= steps; ++s) {
    metrics += json{{"step", s}, {"loss", loss0 / std::sqrt(s)}, {"lr", 1e-3}, {"grad_norm", 1.0},
                    {"tokens_per_s", 1000.0 + s}, {"step_ms", 20.0}, {"mfu", 0.1 + 0.001 * s}}.dump() + "\n";
    if (s % 10 == 0) metrics += json{{"step", s}, {"val_loss", loss0 / std::sqrt(s) + 0.1}}.dump() + "\n";
  }
  metrics += "{\"step\": 99, \"loss\"";  // a line cut short by a crash
  write_file((dir / "metrics.jsonl").string(), metrics);
  write_file((dir / "summary.json").string(), to_json(run_summary(steps)).dump());
  json events = json::array();
  const auto x = [&](const std::string& name, const std::string& cat, int tid, double ms, double dur_ms, json args) {
    events.push_back({{"name", name}, {"cat", cat}, {"ph", "X"}, {"pid", 0}, {"tid", tid}, {"ts", ms * 1e3},
                      {"dur", dur_ms * 1e3}, {"args", args}});
  };
  for (int rank = 0; rank < 2; ++rank)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", rank},
                      {"args", {{"name", "rank " + std::to_string(rank) + " (tp 0/1, dp 0/1, pp " +
                                             std::to_string(rank) + "/2)"}}}});
  for (int k = 0; k < 2; ++k) {
    const double t0 = 100.0 * k;  // each step lasts 20 ms on both ranks
    for (int rank = 0; rank < 2; ++rank) {
      x("step", "step", rank, t0, 20, {{"index", k}, {"step", k + 1}});
      x("Fwd", "instr", rank, t0 + 1, 3, {{"microbatch", 0}, {"chunk", 0}});
      x("Bwd", "instr", rank, t0 + 10, 6, {{"microbatch", 0}, {"chunk", 0}});
    }
    x("RecvBwd", "instr", 0, t0 + 5, 4, {{"microbatch", 0}, {"chunk", 0}});
    x("wait: Cooldown", "wait", 0, t0 + 5, 4, {{"kind", "Cooldown"}});
    x("pagerank", "lane", 10000, t0 + 5.2, 1.5, {{"iteration", k}, {"gap", 3}, {"kind", "Cooldown"}, {"units", 2}});
    x("pagerank", "lane", 10000, t0 + 6.9, 1.5, {{"iteration", k}, {"gap", 3}, {"kind", "Cooldown"}, {"units", 2}});
  }
  write_file((dir / "trace.json").string(), json{{"traceEvents", events}}.dump());
}

TEST(ReportData, ReadsMetricsSummaryAndTrace) {
  TempDir tmp;
  write_run(tmp.path() / "a", 30, 5.0);
  const report::RunData run = report::load_run((tmp.path() / "a").string());
  EXPECT_EQ(run.name, "a");
  ASSERT_EQ(run.steps.size(), 30u);
  EXPECT_DOUBLE_EQ(run.steps[3].loss, 5.0 / 2);
  ASSERT_EQ(run.validation.size(), 3u);
  EXPECT_EQ(run.validation[2].step, 30);
  ASSERT_EQ(run.notes.size(), 1u) << "the cut-short metrics line is noted";
  EXPECT_NE(run.notes[0].find("1 of 34 lines"), std::string::npos) << run.notes[0];
  ASSERT_TRUE(run.summary);
  EXPECT_EQ(run.summary->pp, 2);
  EXPECT_EQ(run.summary->straggler, "stage 1 is the straggler");
  ASSERT_TRUE(run.summary->lanes);
  ASSERT_EQ(run.summary->lanes->stages.size(), 2u);
  EXPECT_DOUBLE_EQ(run.summary->lanes->stages[0].lanes.at("pagerank").harvested_s, 1.5);

  // Stage times over the traced steps after the first: compute 3 + 6 ms, Cooldown 4 ms on stage 0,
  // the rest of the 20 ms step is "other".
  ASSERT_EQ(run.stage_times.size(), 2u);
  EXPECT_NEAR(run.stage_times[0].compute_ms, 9, 1e-9);
  EXPECT_NEAR(run.stage_times[0].wait_ms.at("Cooldown"), 4, 1e-9);
  EXPECT_NEAR(run.stage_times[0].other_ms, 7, 1e-9);
  EXPECT_NEAR(run.stage_times[1].other_ms, 11, 1e-9);

  // The timeline shows the last traced step, from each rank's step start.
  ASSERT_TRUE(run.timeline);
  EXPECT_EQ(run.timeline->step, 2);
  EXPECT_NEAR(run.timeline->span_s, 0.020, 1e-12);
  ASSERT_EQ(run.timeline->ranks.size(), 2u);
  const report::RankTimeline& r0 = run.timeline->ranks[0];
  ASSERT_EQ(r0.lane_steps.size(), 2u);
  EXPECT_NEAR(r0.lane_steps[0].start_s, 0.0052, 1e-12);
  ASSERT_EQ(r0.waits.size(), 1u);
  EXPECT_EQ(r0.waits[0].name, "Cooldown");
  EXPECT_TRUE(run.timeline->ranks[1].lane_steps.empty());
}

TEST(ReportData, MissingFilesAreNotedAndNoRunIsAnError) {
  TempDir tmp;
  fs::create_directories(tmp.path() / "partial");
  write_file((tmp.path() / "partial" / "metrics.jsonl").string(), "{\"step\":1,\"loss\":2.5}\n");
  const report::RunData run = report::load_run((tmp.path() / "partial").string());
  EXPECT_EQ(run.steps.size(), 1u);
  EXPECT_FALSE(run.summary);
  EXPECT_FALSE(run.timeline);
  EXPECT_EQ(run.notes.size(), 2u);  // no summary.json, no trace.json

  fs::create_directories(tmp.path() / "empty");
  try {
    report::load_run((tmp.path() / "empty").string());
    FAIL() << "an empty directory is not a run";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("not a run directory"), std::string::npos) << e.what();
  }
  EXPECT_THROW(report::load_run((tmp.path() / "nowhere").string()), std::runtime_error);
}

TEST(ReportSvg, TicksAreRoundAndCoverTheRange) {
  const std::vector<double> t = report::nice_ticks(0.37, 9.2, 5);
  EXPECT_LE(t.front(), 0.37);
  EXPECT_GE(t.back(), 9.2);
  EXPECT_DOUBLE_EQ(t[1] - t[0], 2.0);
  EXPECT_EQ(report::escape_xml("<a & \"b\">"), "&lt;a &amp; &quot;b&quot;&gt;");
}

TEST(ReportHtml, PageIsSelfContainedAndEscapesNames) {
  TempDir tmp;
  write_run(tmp.path() / "<b>run", 12, 4.0);
  const std::string page = report::render_report({report::load_run((tmp.path() / "<b>run").string())}, "t & <t>");
  EXPECT_EQ(page.find("<b>run"), std::string::npos);
  EXPECT_NE(page.find("&lt;b&gt;run"), std::string::npos);
  EXPECT_NE(page.find("<title>t &amp; &lt;t&gt;</title>"), std::string::npos);
  // Nothing is fetched: no src or href attribute, no stylesheet link, no URL but the SVG namespace.
  EXPECT_FALSE(std::regex_search(page, std::regex("\\s(src|href)\\s*=")));
  EXPECT_EQ(page.find("<link"), std::string::npos);
  const std::string without_ns = std::regex_replace(page, std::regex("http://www\\.w3\\.org/2000/svg"), "");
  EXPECT_EQ(without_ns.find("http://"), std::string::npos);
  EXPECT_EQ(without_ns.find("https://"), std::string::npos);
  for (const char* id : {"summary-table", "chart-loss", "chart-tokens", "chart-mfu", "chart-lr", "chart-grad-norm",
                         "stages-0", "lanes-0", "timeline-0"})
    EXPECT_NE(page.find(std::string("id=\"") + id + "\""), std::string::npos) << id;
}

// The cost overrun does not show, beside it: the estimate with its standard error and the control
// gaps in total, per stage a number or why there is none, and a saving marked estimated.
TEST(ReportHtml, LanesShowTheEstimatedInterferenceNextToTheOverrun) {
  TempDir tmp;
  write_run(tmp.path() / "run", 12, 4.0);
  RunSummary s = run_summary(12);
  InterferenceEstimate e;
  e.control_every = 32;
  e.control_gaps = 23;
  e.lane_gaps = 700;
  e.compared_lane_gaps = 690;
  e.compared_control_gaps = 23;
  e.estimated = true;
  e.extra_s = 0.0125;
  e.stderr_s = 0.0032;
  s.lanes->total.interference = e;
  s.lanes->per_stage[0].lanes.interference = e;
  InterferenceEstimate few = e;
  few.estimated = false;
  few.compared_control_gaps = 5;
  s.lanes->per_stage[1].lanes.interference = few;
  s.lanes->valuation.estimated_overhead = estimate_overhead(s.lanes->total, s.train_seconds, 1);
  write_file((tmp.path() / "run" / "summary.json").string(), to_json(s).dump());
  const std::string page = report::render_report({report::load_run((tmp.path() / "run").string())}, "t");
  EXPECT_NE(page.find("id=\"interference-0\""), std::string::npos);
  EXPECT_NE(page.find("estimated from 23 control gaps left empty against 700 left to the lanes): 0.013 s &plusmn; 0.003 s"),
            std::string::npos);
  // (0.01 overrun + 0.0125) / (0.24 s - 0.0225 s) of training time.
  EXPECT_NE(page.find("estimated overhead with the overrun: +10.3% &plusmn; 1.5% of training time"), std::string::npos);
  EXPECT_NE(page.find("unknown, not enough control gaps (5 compared; each rank needs 8)"), std::string::npos);
  // A run from before the estimate shows no such paragraph.
  write_run(tmp.path() / "old", 12, 4.0);
  EXPECT_EQ(report::render_report({report::load_run((tmp.path() / "old").string())}, "t").find("interference-0"),
            std::string::npos);
}

// Counts of `needle` in `text`.
int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(ReportBrowser, ChromiumRendersTwoRunsWithoutConsoleMessages) {
  const std::string chromium = test_support::find_chromium();
  if (chromium.empty()) GTEST_SKIP() << "chromium not installed (scripts/setup.sh installs Debian's chromium)";
  TempDir tmp;
  write_run(tmp.path() / "run-a", 40, 5.0);
  write_run(tmp.path() / "run-b", 25, 6.0);
  const std::string out = test_support::test_output_dir("ReportBrowser");
  const std::string page = out + "/report.html";
  write_run_report({(tmp.path() / "run-a").string(), (tmp.path() / "run-b").string()}, page, "two runs");
  const test_support::BrowserResult r =
      test_support::load_in_chromium(chromium, page, tmp.path().string(), out + "/report.png");
  ASSERT_EQ(r.exit_code, 0) << r.log;
  EXPECT_TRUE(r.console_messages.empty()) << r.console_messages.front();
  EXPECT_NE(r.dom.find("data-rendered=\"yes\""), std::string::npos) << "the page's script did not run to the end";
  for (const char* id : {"summary-table", "chart-loss", "chart-tokens", "chart-mfu", "stages-0", "lanes-1",
                         "timeline-0", "timeline-1"})
    EXPECT_NE(r.dom.find(std::string("id=\"") + id + "\""), std::string::npos) << id;
  // Loss chart: a training and a validation curve per run, with validation markers.
  const std::string loss = r.dom.substr(r.dom.find("id=\"chart-loss\""), r.dom.find("id=\"chart-tokens\"") - r.dom.find("id=\"chart-loss\""));
  EXPECT_EQ(count(loss, "<path "), 4);
  EXPECT_EQ(count(loss, "<circle "), 4 + 2);
  // Timeline: the lane steps are drawn (two per run, on stage 0) inside the Cooldown wait.
  EXPECT_EQ(count(r.dom, "class=\"box lane-pagerank\""), 4);
  EXPECT_EQ(count(r.dom, "class=\"box wait-Cooldown\""), 2);
  std::error_code ec;
  EXPECT_GT(fs::file_size(out + "/report.png", ec), 10000u) << "no screenshot: " << r.log;
}

// Issue #25: the page shows a run's text samples, its LR and gradient-norm curves, its resolved
// config and its memory, and lays out within a 1280-pixel window (a 1400-pixel one cut the lanes
// section off).
TEST(ReportBrowser, FitsALaptopScreenWithSamplesConfigAndCurves) {
  const std::string chromium = test_support::find_chromium();
  if (chromium.empty()) GTEST_SKIP() << "chromium not installed (scripts/setup.sh installs Debian's chromium)";
  TempDir tmp;
  const fs::path run = tmp.path() / "run-a";
  write_run(run, 40, 5.0);
  RunSummary summary = run_summary(40);
  summary.training_arena_bytes_rank0 = 12.5e6;
  write_file((run / "summary.json").string(), to_json(summary).dump());
  write_file((run / "samples.jsonl").string(),
             json{{"step", 20}, {"prompt", "hacker: n."}, {"text", " a <person> who \xff enjoys"}, {"tokens", {1, 2}}}
                     .dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
  write_file((run / "config.ini").string(), "[model]\nlayers = 4\n[lanes]\nenabled = pagerank\n");
  const std::string out = test_support::test_output_dir("ReportBrowser1280");
  const std::string page = out + "/report.html";
  write_run_report({run.string()}, page, "one run");
  const test_support::BrowserResult r =
      test_support::load_in_chromium(chromium, page, tmp.path().string(), out + "/report.png", 1280, 3400);
  ASSERT_EQ(r.exit_code, 0) << r.log;
  EXPECT_TRUE(r.console_messages.empty()) << r.console_messages.front();
  for (const char* id : {"chart-lr", "chart-grad-norm", "samples-0", "config-0", "lanes-0", "timeline-0"})
    EXPECT_NE(r.dom.find(std::string("id=\"") + id + "\""), std::string::npos) << id;
  EXPECT_NE(r.dom.find("a &lt;person&gt; who"), std::string::npos);  // escaped, invalid byte replaced
  EXPECT_NE(r.dom.find("enabled = pagerank"), std::string::npos);
  EXPECT_NE(r.dom.find("12.50MB"), std::string::npos);
  const std::smatch page_width = [&] {
    std::smatch m;
    std::regex_search(r.dom, m, std::regex("data-page-width=\"([0-9]+)\" data-window-width=\"([0-9]+)\""));
    return m;
  }();
  ASSERT_EQ(page_width.size(), 3u) << "the page's script did not record its width";
  EXPECT_EQ(std::stoi(page_width[2]), 1280);
  EXPECT_LE(std::stoi(page_width[1]), 1280) << "the page is wider than the window: something is cut off";
}

}  // namespace
}  // namespace pipelane
