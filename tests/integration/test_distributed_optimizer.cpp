// `[train] distributed_optimizer` (ZeRO-1) through `pipelane train` under mpirun: bit-identical to
// the replicated optimizer at dp 2 with tp 2 (4 ranks), checkpoints identical to the replicated
// optimizer's, and a checkpoint saved at dp 2 resumed at dp 1 and dp 4.
//
// Clipping is off here (grad_clip = 0): the norm is summed from the shards in another order than
// the replicated optimizer's, so with clipping on the clip scales may differ by a float ulp
// (tests/parallel/test_executor_zero.cpp checks that case where the premise can be seen). With it
// off, every element's update depends only on its reduced gradient, and a reduce-scatter over two
// ranks adds the same two floats as the all-reduce (a + b == b + a): the same bits.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/integration/mpi_job.h"
#include "tests/trainer/checkpoint/test_checkpoint_support.h"
#include "trainer/checkpoint/checkpoint.h"

namespace pipelane {
namespace {

using namespace test_support;

constexpr const char* kZero = " --train.distributed_optimizer=true --train.grad_clip=0";
constexpr const char* kReplicated = " --train.grad_clip=0";

class DistributedOptimizerTraining : public ::testing::Test {
 protected:
  void SetUp() override {
    write_test_corpus(dir_.file("data.h5"));
    write_file(dir_.file("c.ini"), tiny_checkpoint_config(dir_.file("data.h5"), 6, 2));
  }
  JobResult train(int ranks, const std::string& run, const std::string& extra) {
    const JobResult r =
        run_job(ranks, "--config " + dir_.file("c.ini") + " --run.dir=" + dir_.file(run) + " " + extra, dir_.file(run + ".log"));
    EXPECT_EQ(r.exit_code, 0) << run << ":\n" << r.output;
    return r;
  }
  // Every rank's arena in `run` is what the memory model predicted, and smaller than in `other`.
  void expect_arenas_as_predicted_and_below(const std::string& run, const std::string& other, std::size_t ranks) {
    const auto memory = [&](const std::string& r) {
      std::ifstream in(dir_.file(r) + "/summary.json");
      return nlohmann::json::parse(in)["memory"];
    };
    const nlohmann::json mine = memory(run), theirs = memory(other);
    ASSERT_EQ(mine.size(), ranks) << mine.dump();
    for (std::size_t r = 0; r < ranks; ++r) {
      EXPECT_EQ(mine[r]["predicted_bytes"], mine[r]["high_water_bytes"]) << run << " rank " << r;
      EXPECT_LT(mine[r]["high_water_bytes"].get<double>(), theirs[r]["high_water_bytes"].get<double>())
          << run << " rank " << r;
    }
  }
  std::string ckpt(const std::string& run, int step) {
    return dir_.file(run + "/checkpoints/" + checkpoint_dir_name(step));
  }
  TempDir dir_;
};

TEST_F(DistributedOptimizerTraining, BitIdenticalToReplicatedAtDp2WithTp2) {
  train(4, "replicated", std::string("--parallel.tp=2 --train.steps=4") + kReplicated);
  train(4, "zero", std::string("--parallel.tp=2 --train.steps=4") + kZero);
  const auto a = loss_texts(dir_.file("replicated")), b = loss_texts(dir_.file("zero"));
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a, b);
  // The gathered moments are stored in the replicated layout: the same files' tensors.
  expect_same_tensors(ckpt("replicated", 4), ckpt("zero", 4));
  // Every rank's arena is what the memory model predicted for its shard of the moments, and
  // smaller than the replicated optimizer's.
  expect_arenas_as_predicted_and_below("zero", "replicated", 4);
}

// With clipping on, the clip scale min(1, max_norm / (float(norm) + 1e-6)) is the same on both
// sides whenever float(norm) is; the norms (metrics.jsonl keeps them to the last bit) agree to
// ~1e-10 relative, so that holds except for a norm within rounding of a float boundary, and then
// equality is not expected.
TEST_F(DistributedOptimizerTraining, BitIdenticalToReplicatedWithClippingWhileTheClipScalesAgree) {
  const std::string clipped = " --parallel.tp=2 --train.steps=4 --train.grad_clip=0.05";
  train(4, "replicated", clipped);
  train(4, "zero", clipped + " --train.distributed_optimizer=true");
  const StepMetrics a = read_metrics(dir_.file("replicated")), b = read_metrics(dir_.file("zero"));
  ASSERT_EQ(a.loss.size(), 4u);
  ASSERT_EQ(b.loss.size(), 4u);
  for (int s = 0; s < 4; ++s) {
    EXPECT_GT(a.grad_norm[s], 0.05) << "step " << s + 1 << ": clipping must be active to test it";
    // The bound of test_executor_zero.cpp's norm_bound, 3 K u + 2 u with K the additions on the
    // longest path: this model has ~60k parameters, so K < (2 x 60k + 4 ranks) x dp 2 < 10^6 and
    // the bound is under 3.4e-10 relative.
    EXPECT_NEAR(a.grad_norm[s], b.grad_norm[s], 3.4e-10 * a.grad_norm[s]) << "step " << s + 1;
    if (static_cast<float>(a.grad_norm[s]) != static_cast<float>(b.grad_norm[s]))
      GTEST_SKIP() << "step " << s + 1 << ": the norms round to different floats; the clip scales differ by an ulp";
  }
  EXPECT_EQ(loss_texts(dir_.file("replicated")), loss_texts(dir_.file("zero")));
  expect_same_tensors(ckpt("replicated", 4), ckpt("zero", 4));
}

TEST_F(DistributedOptimizerTraining, SavedAtDp2ResumesAtDp1AndDp4) {
  train(2, "dp2", std::string("--train.steps=6") + kZero);
  train(2, "dp2_replicated", std::string("--train.steps=2") + kReplicated);
  expect_same_tensors(ckpt("dp2_replicated", 2), ckpt("dp2", 2));
  const StepMetrics straight = read_metrics(dir_.file("dp2"));
  ASSERT_EQ(straight.loss.size(), 6u);
  for (int dp : {1, 4}) {
    const std::string run = "dp" + std::to_string(dp), ranks_note = " (" + run + ")";
    // Loaded, each rank keeps its shard of the moments; saved again with nothing trained, the
    // shards are gathered back: every tensor as it was.
    train(dp == 1 ? 0 : dp, run, "--train.steps=2 --run.resume=" + ckpt("dp2", 2) + kZero);
    expect_same_tensors(ckpt("dp2", 2), ckpt(run, 2));
    train(dp == 1 ? 0 : dp, run, std::string("--train.steps=6") + kZero);
    const StepMetrics resumed = read_metrics(dir_.file(run));
    ASSERT_EQ(resumed.loss.size(), 4u) << ranks_note;  // steps 3..6
    // The same continuation as the straight run, up to the reduction order of another dp (the
    // tolerance of the other cross-grid resumes, test_checkpoint_parallel.cpp).
    for (int i = 0; i < 4; ++i)
      EXPECT_NEAR(straight.loss[i + 2], resumed.loss[i], 1e-4 * straight.loss[i + 2]) << "step " << i + 3 << ranks_note;
  }
  // At dp 1 the option is the replicated optimizer: the continuation from the replicated
  // optimizer's checkpoint is the same bits.
  train(0, "dp1_replicated", "--train.steps=6 --run.resume=" + ckpt("dp2_replicated", 2) + kReplicated);
  const auto zero = loss_texts(dir_.file("dp1")), replicated = loss_texts(dir_.file("dp1_replicated"));
  ASSERT_EQ(zero.size(), 6u);
  EXPECT_FALSE(zero[5].empty());
  EXPECT_EQ(zero, replicated);
}

// bf16 GEMM weights under the distributed optimizer shard the fp32 masters too: no rank holds the
// whole fp32 model. Through the whole trainer at dp 2: the replicated optimizer's losses,
// checkpoints and samples (the model gathered on rank 0 from the masters' shards) bit for bit; each
// rank's arena as predicted and smaller than the replicated optimizer's; a resume at step 2 that
// continues with the straight run's bits (each rank keeps its shard of the loaded parameters); and
// init_from, as the replicated optimizer's.
TEST_F(DistributedOptimizerTraining, ShardedMastersUnderBf16GemmWeightsTrainAndResumeAsReplicated) {
  const std::string bf16 = " --train.precision=bf16 --train.gemm_weights=bf16 --train.sample_every=2 "
                           "--train.sample_tokens=4";
  train(2, "replicated", "--train.steps=4" + bf16 + kReplicated);
  train(2, "zero", "--train.steps=4" + bf16 + kZero);
  const auto straight = loss_texts(dir_.file("zero"));
  ASSERT_EQ(straight.size(), 4u);
  EXPECT_EQ(loss_texts(dir_.file("replicated")), straight);
  expect_same_tensors(ckpt("replicated", 4), ckpt("zero", 4));
  const auto samples = [&](const std::string& run) {
    std::ifstream in(dir_.file(run) + "/samples.jsonl");
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_FALSE(samples("zero").empty());
  EXPECT_EQ(samples("zero"), samples("replicated"));
  expect_arenas_as_predicted_and_below("zero", "replicated", 2);
  train(2, "resumed", "--train.steps=4 --run.resume=" + ckpt("zero", 2) + bf16 + kZero);
  const auto resumed = loss_texts(dir_.file("resumed"));
  ASSERT_EQ(resumed.size(), 4u);
  EXPECT_EQ(resumed[2], straight[2]);
  EXPECT_EQ(resumed[3], straight[3]);
  expect_same_tensors(ckpt("zero", 4), ckpt("resumed", 4));
  // [run] init_from: the weights alone, written through a load's view, each rank keeping its shard.
  for (const char* run : {"init_replicated", "init_zero"})
    train(2, run, "--train.steps=2 --run.init_from=" + ckpt("zero", 4) + bf16 +
                      (std::string(run) == "init_zero" ? kZero : kReplicated));
  const auto initialised = loss_texts(dir_.file("init_zero"));
  ASSERT_EQ(initialised.size(), 2u);
  EXPECT_EQ(initialised, loss_texts(dir_.file("init_replicated")));
  EXPECT_NE(initialised[0], straight[0]);  // not a fresh start
}

}  // namespace
}  // namespace pipelane
