// Lanes inside multi-rank training: the losses are bit-identical with lanes on and off, and a lane
// that throws or goes past its memory quota is quarantined while training carries on untouched.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

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
  StepMetrics train(const std::string& name, const std::string& extra, JobResult* job = nullptr) {
    const std::string run = dir_.file(name);
    JobResult r = run_job(2, "--config " + dir_.file("tiny.ini") + " --run.dir=" + run +
                                 " --parallel.pp=2 --train.steps=6 " + extra,
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
  EXPECT_NE(job.output.find("quarantined"), std::string::npos) << job.output;
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
  const StepMetrics off = train("off", "");
  JobResult job;
  const StepMetrics on = train("slow", "--lanes.enabled=imageproc --lanes.profile_iterations=1 "
                                       "--lane.imageproc.input_dir=" + dir_.file("images") +
                                       " --lane.imageproc.out_width=8 --lane.imageproc.out_height=6"
                                       " --lane.imageproc.steps_per_image=1",  // each big image one step
                               &job);
  const auto total = lanes_total("slow");
  // Every rank runs its own copy of the lane. The first stage waits often enough to reach the big
  // images even on a busy machine; the last one may not get that far, but if it is quarantined
  // too, it is for the same reason.
  ASSERT_GE(total["quarantined"].size(), 1u) << total.dump() << job.output;
  EXPECT_EQ(total["quarantined"][0]["rank"], 0) << total.dump();
  for (const auto& q : total["quarantined"])
    EXPECT_NE(q["reason"].get<std::string>().find("3 of its last"), std::string::npos)
        << total.dump();
  EXPECT_EQ(on.loss, off.loss);
}

}  // namespace
}  // namespace pipelane
