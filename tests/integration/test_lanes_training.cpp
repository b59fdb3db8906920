// Lanes inside multi-rank training: the losses are bit-identical with lanes on and off, a lane
// that throws or goes past its memory quota is quarantined while training carries on untouched, a
// deterministic run's plan replayed by another run places the same lane steps in the same gaps,
// and plugin instances on every rank split their work.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "tests/integration/mpi_job.h"

namespace pipelane {
namespace {

using namespace test_support;

class LanesTraining : public ::testing::Test {
 protected:
  void SetUp() override {
    write_test_corpus(dir_.file("data.h5"));
    write_file(dir_.file("tiny.ini"), tiny_parallel_config(dir_.file("data.h5")));
  }
  StepMetrics train(const std::string& name, const std::string& extra, JobResult* job = nullptr, int steps = 6) {
    const std::string run = dir_.file(name);
    JobResult r = run_job(2, "--config " + dir_.file("tiny.ini") + " --run.dir=" + run +
                                 " --parallel.pp=2 --train.steps=" + std::to_string(steps) + " " + extra,
                          run + ".log");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    if (job) *job = r;
    return read_metrics(run);
  }
  nlohmann::json lanes_total(const std::string& name) {
    std::ifstream in(dir_.file(name) + "/summary.json");
    return nlohmann::json::parse(in)["lanes"]["total"];
  }
  TempDir dir_;
};

TEST_F(LanesTraining, LossesAreBitIdenticalWithLanesOnAndOff) {
  const StepMetrics off = train("off", "");
  const StepMetrics on = train("on", "--lanes.enabled=pagerank,imageproc --lanes.profile_iterations=1 "
                                     "--lane.pagerank.generate=rmat --lane.pagerank.scale=10 "
                                     "--lane.imageproc.generate=1000 --lane.imageproc.width=64 "
                                     "--lane.imageproc.height=48");
  ASSERT_EQ(off.loss.size(), 6u);
  EXPECT_EQ(on.loss, off.loss);  // exact: lanes never touch training memory or its arithmetic
  EXPECT_EQ(on.grad_norm, off.grad_norm);
  const auto total = lanes_total("on");
  EXPECT_GT(total["bubble_s"].get<double>(), 0.0);
  EXPECT_GT(total["lanes"]["pagerank"]["units"].get<double>() +
                total["lanes"]["imageproc"]["units"].get<double>(), 0.0)
      << total.dump();
  // Control gaps (one in 32 by default, few in 6 steps) left empty one gap in two: still the same bits.
  const StepMetrics controls = train("controls", "--lanes.enabled=pagerank --lanes.profile_iterations=1 "
                                                 "--lane.pagerank.generate=rmat --lane.pagerank.scale=10 "
                                                 "--lanes.control_every=2");
  EXPECT_EQ(controls.loss, off.loss);
  EXPECT_EQ(controls.grad_norm, off.grad_norm);
  const auto with_controls = lanes_total("controls");
  EXPECT_GT(with_controls["interference"]["control_gaps"].get<long>(), 0) << with_controls.dump();
}

// Activation recomputation with lanes on, through `pipelane train` on two ranks: the same losses
// and gradient norms as recompute = none with lanes off, bit for bit, and every rank's summary
// row has the memory model's prediction equal to the arena's high-water mark, smaller than none's.
TEST_F(LanesTraining, RecomputeWithLanesOnIsBitIdenticalAndItsArenaMeetsThePrediction) {
  const StepMetrics off = train("plain", "", nullptr, 3);
  const std::string lanes = " --lanes.enabled=pagerank --lanes.profile_iterations=1 --lane.pagerank.generate=rmat "
                            "--lane.pagerank.scale=10";
  const StepMetrics full = train("full", "--train.recompute=full" + lanes, nullptr, 3);
  const StepMetrics selective = train("selective", "--train.recompute=selective --parallel.schedule=zb-h1" + lanes, nullptr, 3);
  const StepMetrics zb = train("zb", "--parallel.schedule=zb-h1", nullptr, 3);
  ASSERT_EQ(off.loss.size(), 3u);
  EXPECT_EQ(full.loss, off.loss);
  EXPECT_EQ(full.grad_norm, off.grad_norm);
  EXPECT_EQ(selective.loss, zb.loss);
  EXPECT_EQ(selective.grad_norm, zb.grad_norm);
  const auto memory = [&](const std::string& name) {
    std::ifstream in(dir_.file(name) + "/summary.json");
    return nlohmann::json::parse(in)["memory"];
  };
  const nlohmann::json plain = memory("plain"), recomputed = memory("full");
  ASSERT_EQ(recomputed.size(), 2u) << recomputed.dump();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(recomputed[r]["predicted_bytes"], recomputed[r]["high_water_bytes"]) << r;
    EXPECT_LT(recomputed[r]["high_water_bytes"].get<double>(), plain[r]["high_water_bytes"].get<double>()) << r;
  }
}

TEST_F(LanesTraining, FailingLanesAreQuarantinedAndTrainingCarriesOn) {
  write_file(dir_.file("bad_graph.txt"), "0 1\n1 2\nthis is not an edge\n");
  const StepMetrics off = train("off", "");
  JobResult job;
  // pagerank throws on the malformed line; imageproc's 640x480 images do not fit in 1 MiB.
  const StepMetrics bad = train("bad", "--lanes.enabled=pagerank,imageproc --lanes.memory_mb=1 "
                                       "--lane.pagerank.graph=" + dir_.file("bad_graph.txt") +
                                       " --lane.imageproc.generate=10", &job);
  EXPECT_EQ(bad.loss, off.loss);
  const auto total = lanes_total("bad");
  std::set<std::string> quarantined;
  for (const auto& q : total["quarantined"]) quarantined.insert(q["lane"].get<std::string>());
  EXPECT_TRUE(quarantined.count("pagerank")) << total.dump();
  EXPECT_TRUE(quarantined.count("imageproc")) << total.dump();
  // Said once per lane and rank, with one prefix: "pipelane lanes: stage 0 rank 0: lane 'pagerank' quarantined".
  EXPECT_NE(job.output.find("pipelane lanes: stage 0 rank 0: lane 'pagerank' quarantined"), std::string::npos)
      << job.output;
  EXPECT_EQ(job.output.find(": lanes: "), std::string::npos) << job.output;
}

// Lane steps per (rank, lane, gap id) and per (rank, lane), from the run's trace; lanes a run
// quarantined (a step ten times its prediction twice in a row: the machine's timing, which no plan
// repeats) are listed apart.
struct LaneStepCounts {
  std::map<std::tuple<int, std::string, int>, int> per_gap;
  std::map<std::pair<int, std::string>, int> per_lane;
  std::set<std::pair<int, std::string>> quarantined;
};

LaneStepCounts lane_step_counts(const std::string& run_dir) {
  LaneStepCounts counts;
  std::ifstream trace_file(run_dir + "/trace.json");
  const nlohmann::json trace = nlohmann::json::parse(trace_file);
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("cat", "") != "lane") continue;  // gap steps only (not calibration)
    const int rank = (e["tid"].get<int>() - 10000) / 100;
    const std::string lane = e["name"];
    ++counts.per_gap[{rank, lane, e["args"]["gap"].get<int>()}];
    ++counts.per_lane[{rank, lane}];
  }
  std::ifstream summary_file(run_dir + "/summary.json");
  const nlohmann::json summary = nlohmann::json::parse(summary_file);
  for (const auto& q : summary["lanes"]["total"]["quarantined"])
    counts.quarantined.insert({q["rank"].get<int>(), q["lane"].get<std::string>()});
  return counts;
}

// `counts` without the lanes in `drop`.
LaneStepCounts without(LaneStepCounts counts, const std::set<std::pair<int, std::string>>& drop) {
  std::erase_if(counts.per_gap, [&](const auto& e) { return drop.count({std::get<0>(e.first), std::get<1>(e.first)}); });
  std::erase_if(counts.per_lane, [&](const auto& e) { return drop.count(e.first); });
  return counts;
}

TEST_F(LanesTraining, AReplayedPlanRunsTheSameLaneStepsInTheSameGaps) {
  const std::string lanes = "--lanes.enabled=pagerank,imageproc --lanes.profile_iterations=1 "
                            "--lane.pagerank.generate=rmat --lane.pagerank.scale=10 --lane.pagerank.tolerance=0 "
                            "--lane.pagerank.max_iterations=1000000 --lane.imageproc.generate=100000 "
                            "--lane.imageproc.width=32 --lane.imageproc.height=24";
  const StepMetrics first = train("planned", lanes + " --lanes.deterministic=true");
  // The replay's own timing differs (other load, other gap lengths): the plan decides, not the clock.
  const StepMetrics replayed = train("replayed", lanes + " --lanes.plan=" + dir_.file("planned") + "/summary.json");
  EXPECT_EQ(replayed.loss, first.loss);
  const LaneStepCounts a = lane_step_counts(dir_.file("planned"));
  const LaneStepCounts b = lane_step_counts(dir_.file("replayed"));
  std::set<std::pair<int, std::string>> quarantined = a.quarantined;
  quarantined.insert(b.quarantined.begin(), b.quarantined.end());
  const LaneStepCounts a_kept = without(a, quarantined), b_kept = without(b, quarantined);
  std::set<int> compared_ranks;
  for (const auto& [rank_lane, steps] : a_kept.per_lane) compared_ranks.insert(rank_lane.first);
  ASSERT_EQ(compared_ranks, (std::set<int>{0, 1}))
      << "every lane of a rank was quarantined: nothing to compare";
  EXPECT_EQ(b_kept.per_gap, a_kept.per_gap);
  EXPECT_EQ(b_kept.per_lane, a_kept.per_lane);
  std::ifstream in(dir_.file("replayed") + "/summary.json");
  const nlohmann::json per_rank = nlohmann::json::parse(in)["lanes"]["per_rank"];
  for (const auto& rank : per_rank) EXPECT_TRUE(rank["deterministic"].get<bool>()) << rank.dump();

  // A plan for another pipeline is refused before training, with one line.
  const JobResult job = run_job(2, "--config " + dir_.file("tiny.ini") + " --run.dir=" + dir_.file("wrong") +
                                      " --parallel.pp=2 --train.steps=6 --parallel.schedule=gpipe " + lanes +
                                      " --lanes.plan=" + dir_.file("planned") + "/summary.json",
                                  dir_.file("wrong.log"));
  EXPECT_EQ(job.exit_code, 2) << job.output;
  EXPECT_NE(job.output.find("summary.json: the plan was made for schedule 1f1b"), std::string::npos) << job.output;
}

TEST_F(LanesTraining, PluginInstancesOnEveryRankShareOneInput) {
  // word_count on both ranks of pp = 2: each instance counts its half, together the file once.
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "pipeline bubbles lane " + std::to_string(i) + "\n";
  write_file(dir_.file("words.txt"), text);
  train("words", "--lanes.enabled=word_count --lanes.plugins=" + build_dir() +
                     "/lanes/examples/libpipelane_example_lane.so --lane.word_count.input=" + dir_.file("words.txt") +
                     " --lane.word_count.chunk_bytes=512 --lanes.profile_iterations=1");
  std::ifstream in(dir_.file("words") + "/summary.json");
  const nlohmann::json per_rank = nlohmann::json::parse(in)["lanes"]["per_rank"];
  ASSERT_EQ(per_rank.size(), 2u);
  long long bytes = 0;
  for (const auto& rank : per_rank) {
    const nlohmann::json& report = rank["lanes"]["word_count"]["report"];
    EXPECT_EQ(report["instances"], 2) << report.dump();
    EXPECT_EQ(report["instance"], rank["rank"]) << report.dump();
    bytes += report["bytes_counted"].get<long long>();
  }
  // What the ranks counted never overlaps: at most the file, all of it once both finish.
  EXPECT_LE(bytes, static_cast<long long>(text.size()));
  EXPECT_GT(bytes, 0);
}

// A binary PPM of w x h grey pixels.
std::string ppm(int w, int h) {
  std::string out = "P6\n" + std::to_string(w) + " " + std::to_string(h) + "\n255\n";
  out.append(static_cast<std::size_t>(w) * h * 3, '\x80');
  return out;
}

TEST_F(LanesTraining, ALaneThatOverrunsItsPredictionTenfoldIsQuarantined) {
  // Calibration sees tiny images (a fraction of a millisecond each); the three after it, in gaps,
  // are large enough that each step takes far more than 10x the prediction (and far less than
  // the step deadline of half a second, so they are slow, not hung).
  std::filesystem::create_directories(dir_.file("images"));
  for (int i = 0; i < 3; ++i) {  // the 3 calibration steps
    char name[32];
    std::snprintf(name, sizeof name, "a%03d.ppm", i);
    write_file(dir_.file("images/") + name, ppm(16, 12));
  }
  // Three in the lane's window of 16 steps: a spike or two is forgiven (it can be the machine),
  // a habit is the lane.
  for (const char* name : {"images/z_big1.ppm", "images/z_big2.ppm", "images/z_big3.ppm"})
    write_file(dir_.file(name), ppm(5000, 4000));  // (a warm step of this size: ~20x a tiny one)
  // A wider model than the fixture's: its gaps (a microbatch's compute on the other stage) must
  // hold a tiny image's step with room to spare on any machine; with d_model 32 they were ~0.3 ms,
  // about one tiny step, and on a fast machine the lane was placed nowhere at all.
  const std::string wider = " --model.d_model=128 ";
  const StepMetrics off = train("off", wider);
  JobResult job;
  const StepMetrics on = train("slow", wider + "--lanes.enabled=imageproc --lanes.profile_iterations=1 "
                                       "--lane.imageproc.input_dir=" + dir_.file("images") +
                                       " --lane.imageproc.out_width=8 --lane.imageproc.out_height=6"
                                       " --lane.imageproc.steps_per_image=1",  // each big image one step
                               &job);
  const auto total = lanes_total("slow");
  // Every rank runs its own copy of the lane. The first stage waits often enough to reach the big
  // images even on a busy machine; the last one may not get that far, but if it is quarantined
  // too, it is for the same reason.
  // On failure, each rank's lane: its calibrated and predicted step, its steps, why not judged.
  std::ifstream summary_file(dir_.file("slow") + "/summary.json");
  const nlohmann::json per_rank = nlohmann::json::parse(summary_file)["lanes"]["per_rank"];
  ASSERT_GE(total["quarantined"].size(), 1u) << total.dump() << "\nper rank: " << per_rank.dump() << job.output;
  EXPECT_EQ(total["quarantined"][0]["rank"], 0) << total.dump();
  for (const auto& q : total["quarantined"])
    EXPECT_NE(q["reason"].get<std::string>().find("3 of its last"), std::string::npos)
        << total.dump();
  EXPECT_EQ(on.loss, off.loss);
}

}  // namespace
}  // namespace pipelane
