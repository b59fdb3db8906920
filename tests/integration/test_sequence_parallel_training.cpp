// `[parallel] sequence_parallel` through `pipelane train` under mpirun (the MPI data plane's
// all-gather and reduce-scatter, which the threaded tests do not reach): tp 2 x pp 2 with the
// zero-bubble schedule, GPT-2 and Llama, against tp alone on the same grid.
//
// Tolerance: the first step's loss is bit-identical (the same float operations;
// tests/model/test_sequence_parallel.cpp); afterwards the norms' gradients are reassociated sums
// (each rank's rows, then over tp), and the bound of 1e-5 relative holds the losses and
// gradient norms that follow (the threaded executor test measures ~4e-8 at these sizes).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/integration/mpi_job.h"
#include "tests/trainer/checkpoint/test_checkpoint_support.h"

namespace pipelane {
namespace {

using namespace test_support;

class SequenceParallelTraining : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    write_test_corpus(dir_.file("data.h5"));
    write_file(dir_.file("c.ini"), tiny_checkpoint_config(dir_.file("data.h5"), 4, 0));
  }
  void train(const std::string& run, const std::string& extra) {
    const JobResult r = run_job(4, "--config " + dir_.file("c.ini") + " --run.dir=" + dir_.file(run) +
                                       " --parallel.tp=2 --parallel.pp=2 --parallel.schedule=zb-h1 " + GetParam() + extra,
                                dir_.file(run + ".log"));
    ASSERT_EQ(r.exit_code, 0) << run << ":\n" << r.output;
  }
  nlohmann::json memory(const std::string& run) {
    std::ifstream in(dir_.file(run) + "/summary.json");
    return nlohmann::json::parse(in)["memory"];
  }
  TempDir dir_;
};

TEST_P(SequenceParallelTraining, TrainsAsTensorParallelAloneInLessMemory) {
  train("tp", "");
  train("sp", " --parallel.sequence_parallel=true");
  const StepMetrics a = read_metrics(dir_.file("tp")), b = read_metrics(dir_.file("sp"));
  ASSERT_EQ(a.loss.size(), 4u);
  ASSERT_EQ(b.loss.size(), 4u);
  EXPECT_EQ(b.loss[0], a.loss[0]);
  for (int s = 0; s < 4; ++s) {
    EXPECT_LE(std::fabs(b.loss[s] - a.loss[s]), 1e-5 * std::fabs(a.loss[s])) << "step " << s + 1;
    EXPECT_LE(std::fabs(b.grad_norm[s] - a.grad_norm[s]), 1e-5 * a.grad_norm[s]) << "step " << s + 1;
  }
  const nlohmann::json tp = memory("tp"), sp = memory("sp");
  ASSERT_EQ(sp.size(), 4u) << sp.dump();
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(sp[r]["predicted_bytes"], sp[r]["high_water_bytes"]) << r;
    EXPECT_LT(sp[r]["high_water_bytes"].get<double>(), tp[r]["high_water_bytes"].get<double>()) << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, SequenceParallelTraining,
                         ::testing::Values("", "--model.arch=llama --model.kv_heads=2 --model.ffn_hidden=48"),
                         [](const auto& info) { return std::string(info.index == 0 ? "gpt2" : "llama"); });

}  // namespace
}  // namespace pipelane
