// FreeRide's side tasks (the graph lanes, the JPEG image job, the CNN training lanes) in the bubbles
// of a pp = 2 training: losses bit-identical to lanes off, every lane placed in gaps, none quarantined.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/integration/mpi_job.h"

namespace pipelane {
namespace {

using namespace test_support;

// A 4-step pp=2 training of the tiny config at d_model 128: gaps of a few milliseconds (a
// microbatch's compute on the other stage), which hold these lanes' steps many times over.
class LanesFreeRideTraining : public ::testing::Test {
 protected:
  void SetUp() override {
    write_test_corpus(dir.file("data.h5"));
    write_file(dir.file("tiny.ini"), tiny_parallel_config(dir.file("data.h5")));
  }
  StepMetrics train(const std::string& name, const std::string& extra) {
    const std::string run = dir.file(name);
    const JobResult r = run_job(2, "--config " + dir.file("tiny.ini") + " --run.dir=" + run +
                                       " --parallel.pp=2 --train.steps=4 --model.d_model=128 " + extra,
                                run + ".log");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return read_metrics(run);
  }
  TempDir dir;
};

TEST_F(LanesFreeRideTraining, GraphAndJpegLanesRunInTheBubblesWithBitIdenticalLosses) {
  const StepMetrics off = train("off", "");
  const StepMetrics on = train(
      "on",
      "--lanes.enabled=pagerank,graphsgd,bfs,jpegimage --lanes.profile_iterations=1 "
      "--lane.pagerank.generate=rmat --lane.pagerank.scale=10 --lane.pagerank.slice_edges=2048 "
      "--lane.graphsgd.generate=rmat --lane.graphsgd.scale=10 --lane.graphsgd.slice_edges=512 "
      "--lane.graphsgd.iterations=100000 "
      "--lane.bfs.generate=rmat --lane.bfs.scale=10 --lane.bfs.undirected=true --lane.bfs.traversals=100000 "
      "--lane.bfs.slice_edges=2048 "
      "--lane.jpegimage.generate=100000 --lane.jpegimage.width=32 --lane.jpegimage.height=24 "
      "--lane.jpegimage.out_width=16 --lane.jpegimage.out_height=12");
  ASSERT_EQ(off.loss.size(), 4u);
  EXPECT_EQ(on.loss, off.loss);  // exact: lanes never touch training memory or its arithmetic
  EXPECT_EQ(on.grad_norm, off.grad_norm);
  std::ifstream in(dir.file("on") + "/summary.json");
  const nlohmann::json total = nlohmann::json::parse(in)["lanes"]["total"];
  EXPECT_TRUE(total["quarantined"].empty()) << total["quarantined"].dump();
  for (const char* lane : {"pagerank", "graphsgd", "bfs", "jpegimage"}) {
    const nlohmann::json& stats = total["lanes"][lane];
    // Units beyond the calibration's: work done inside the bubbles.
    EXPECT_GT(stats["steps"].get<long>(), 0) << lane << ": " << stats.dump();
    EXPECT_GT(stats["units"].get<double>(), stats["calibration_units"].get<double>()) << lane << ": " << stats.dump();
  }
  EXPECT_EQ(total["lanes"]["bfs"]["work_unit"], "edges") << total["lanes"]["bfs"].dump();
  EXPECT_EQ(total["lanes"]["jpegimage"]["work_unit"], "images") << total["lanes"]["jpegimage"].dump();
}

TEST_F(LanesFreeRideTraining, CnnLanesTrainInTheBubblesWithBitIdenticalLosses) {
  // The three at width 64/16, 32x32, batch 2: blocks of 0.3 MFLOP-equivalents (~0.1-0.5 ms),
  // which the few-millisecond gaps hold; a training step of the lane is a few hundred blocks.
  std::string lanes = "--lanes.enabled=resnet18,resnet50,vgg19 --lanes.profile_iterations=1";
  for (const char* arch : {"resnet18", "resnet50", "vgg19"})
    for (const char* kv : {"width_divisor=16", "image_size=32", "batch=2", "step_mflop=0.3", "steps=100000"})
      lanes += std::string(" --lane.") + arch + "." + kv;
  const StepMetrics off = train("off", "");
  const StepMetrics on = train("on", lanes);
  ASSERT_EQ(off.loss.size(), 4u);
  EXPECT_EQ(on.loss, off.loss);  // exact
  EXPECT_EQ(on.grad_norm, off.grad_norm);
  std::ifstream in(dir.file("on") + "/summary.json");
  const nlohmann::json total = nlohmann::json::parse(in)["lanes"]["total"];
  EXPECT_TRUE(total["quarantined"].empty()) << total["quarantined"].dump();
  for (const char* lane : {"resnet18", "resnet50", "vgg19"}) {
    const nlohmann::json& stats = total["lanes"][lane];
    EXPECT_EQ(stats["work_unit"], "images") << lane;
    EXPECT_GT(stats["steps"].get<long>(), 0) << lane << ": " << stats.dump();
    EXPECT_GT(stats["units"].get<double>(), stats["calibration_units"].get<double>()) << lane << ": " << stats.dump();
  }
}

}  // namespace
}  // namespace pipelane
