// Checkpoints across ranks: exact stop/resume under pp 2, resharding (saved at pp 2, loaded at
// tp 2 and in one process), and a missing shard stopping a multi-rank job with one message.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "tests/integration/mpi_job.h"
#include "tests/trainer/checkpoint/test_checkpoint_support.h"
#include "trainer/checkpoint/checkpoint.h"

namespace pipelane {
namespace {

namespace fs = std::filesystem;
using namespace test_support;

class CheckpointParallel : public ::testing::Test {
 protected:
  void SetUp() override {
    write_test_corpus(dir_.file("data.h5"));
    write_file(dir_.file("c.ini"), tiny_checkpoint_config(dir_.file("data.h5"), 6, 2));
  }
  JobResult train(int ranks, const std::string& run, const std::string& extra, const std::string& env = "") {
    return run_job(ranks, "--config " + dir_.file("c.ini") + " --run.dir=" + dir_.file(run) + " " + extra,
                   dir_.file(run + ".log"), env);
  }
  std::string ckpt(const std::string& run, int step) {
    return dir_.file(run + "/checkpoints/" + checkpoint_dir_name(step));
  }
  TempDir dir_;
};

TEST_F(CheckpointParallel, PipelineStopAndResumeIsBitIdentical) {
  ASSERT_EQ(train(2, "straight", "--parallel.pp=2").exit_code, 0);
  ASSERT_EQ(train(2, "resumed", "--parallel.pp=2", "PIPELANE_STOP_AFTER_STEP=3").exit_code, 0);
  const JobResult r = train(2, "resumed", "--parallel.pp=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("(step 2)"), std::string::npos) << r.output;
  EXPECT_EQ(loss_texts(dir_.file("straight")), loss_texts(dir_.file("resumed")));
  CheckpointReader manifest(ckpt("resumed", 6));
  EXPECT_EQ(manifest.manifest()["files"].size(), 2u);  // model_pp00_tp00.h5, model_pp01_tp00.h5
  expect_same_tensors(ckpt("straight", 6), ckpt("resumed", 6));
}

TEST_F(CheckpointParallel, SavedAtPp2LoadsAtTp2AndInOneProcess) {
  ASSERT_EQ(train(2, "pp2", "--parallel.pp=2 --train.steps=2").exit_code, 0);
  // Loading and immediately saving again (nothing left to train) must reproduce every tensor.
  const JobResult tp = train(2, "tp2", "--parallel.tp=2 --train.steps=2 --run.resume=" + ckpt("pp2", 2));
  ASSERT_EQ(tp.exit_code, 0) << tp.output;
  CheckpointReader tp_ckpt(ckpt("tp2", 2));
  EXPECT_EQ(tp_ckpt.manifest()["topology"]["tp"], 2);
  expect_same_tensors(ckpt("pp2", 2), ckpt("tp2", 2));
  const JobResult one = train(0, "one", "--train.steps=2 --run.resume=" + ckpt("tp2", 2));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  expect_same_tensors(ckpt("pp2", 2), ckpt("one", 2));
  // Training on from the resharded state follows the pp 2 run closely (the reduction order differs).
  ASSERT_EQ(train(2, "pp2", "--parallel.pp=2 --train.steps=6").exit_code, 0);
  ASSERT_EQ(train(2, "tp2", "--parallel.tp=2 --train.steps=6").exit_code, 0);
  const StepMetrics a = read_metrics(dir_.file("pp2")), b = read_metrics(dir_.file("tp2"));
  ASSERT_EQ(a.loss.size(), 6u);
  ASSERT_EQ(b.loss.size(), 4u);  // steps 3..6: "tp2" started from pp2's checkpoint, not its own rows
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(a.loss[i + 2], b.loss[i], 1e-4 * a.loss[i + 2]) << "step " << i + 3;
}

// Lane state is per world rank: under pp 2 both ranks write a lane file, and a resume on the same
// grid continues each rank's lane from its own saved progress; on another grid it is skipped.
TEST_F(CheckpointParallel, LaneStateIsSavedPerRankAndRestoredOnTheSameGrid) {
  // tolerance 0: the lane never converges, so every calibration step adds one iteration.
  const std::string lanes = " --lanes.enabled=pagerank --lane.pagerank.generate=rmat --lane.pagerank.scale=10"
                            " --lane.pagerank.tolerance=0 --lane.pagerank.max_iterations=100000000";
  ASSERT_EQ(train(2, "a", "--parallel.pp=2 --train.steps=2" + lanes).exit_code, 0);
  CheckpointReader saved(ckpt("a", 2));
  ASSERT_EQ(saved.manifest()["lane_files"].size(), 2u) << saved.manifest().dump();
  int before[2];
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(fs::exists(ckpt("a", 2) + "/" + lane_file_name(r)));
    const auto st = saved.lane_states(r);
    ASSERT_TRUE(st) << "rank " << r;
    before[r] = nlohmann::json::parse(st->states.at("pagerank"))["iteration"].get<int>();
    EXPECT_GE(before[r], 3) << "rank " << r;  // at least the calibration steps
  }
  // Nothing left to train: the resumed run only loads, calibrates (3 more iterations) and saves.
  const JobResult same = train(2, "b", "--parallel.pp=2 --train.steps=2 --run.resume=" + ckpt("a", 2) + lanes);
  ASSERT_EQ(same.exit_code, 0) << same.output;
  EXPECT_EQ(same.output.find("not restored"), std::string::npos) << same.output;
  CheckpointReader again(ckpt("b", 2));
  for (int r = 0; r < 2; ++r) {
    const auto st = again.lane_states(r);
    ASSERT_TRUE(st) << "rank " << r;
    EXPECT_EQ(nlohmann::json::parse(st->states.at("pagerank"))["iteration"].get<int>(), before[r] + 3) << "rank " << r;
  }
  // Another grid: the training state loads, the lanes start fresh with one line per rank.
  const JobResult other = train(2, "c", "--parallel.tp=2 --train.steps=2 --run.resume=" + ckpt("a", 2) + lanes);
  ASSERT_EQ(other.exit_code, 0) << other.output;
  EXPECT_NE(other.output.find("saved lane state not restored: saved on grid tp 1 x dp 1 x pp 2"), std::string::npos)
      << other.output;
  expect_same_tensors(ckpt("a", 2), ckpt("c", 2));
  CheckpointReader fresh(ckpt("c", 2));
  for (int r = 0; r < 2; ++r) {
    const auto st = fresh.lane_states(r);
    ASSERT_TRUE(st) << "rank " << r;
    EXPECT_EQ(nlohmann::json::parse(st->states.at("pagerank"))["iteration"].get<int>(), 3) << "rank " << r;
  }
}

TEST_F(CheckpointParallel, MissingShardStopsEveryRankWithOneMessage) {
  ASSERT_EQ(train(2, "a", "--parallel.pp=2 --train.steps=2").exit_code, 0);
  fs::remove(ckpt("a", 2) + "/model_pp01_tp00.h5");
  const JobResult r = train(2, "a", "--parallel.pp=2 --train.steps=4");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("shard model_pp01_tp00.h5 is missing"), std::string::npos) << r.output;
  std::size_t n = 0;
  for (auto at = r.output.find("pipelane train:"); at != std::string::npos; at = r.output.find("pipelane train:", at + 1)) ++n;
  EXPECT_EQ(n, 1u) << r.output;
  EXPECT_LT(r.seconds, 60);
}

// A save that fails on the ranks (a file size limit standing in for a full disk, as in
// run_with_file_size_limit) stops every rank in agreement with one line, and leaves nothing behind.
TEST_F(CheckpointParallel, FailedSaveStopsEveryRankWithOneLineAndLeavesNothing) {
  ASSERT_EQ(train(2, "a", "--parallel.pp=2 --train.steps=2").exit_code, 0);
  const std::uintmax_t shard_bytes = fs::file_size(ckpt("a", 2) + "/model_pp01_tp00.h5");
  // The limit is set inside each rank (mpirun's own shared-memory files would hit it otherwise):
  // the shell's ulimit is setrlimit(RLIMIT_FSIZE) in 512-byte blocks, and an ignored SIGXFSZ stays
  // ignored across exec, so a write past it fails with EFBIG.
  const std::string rank_cmd = "ulimit -f " + std::to_string(shard_bytes / 3 / 512) + " && trap '' XFSZ && exec " +
                               build_dir() + "/pipelane train --config " + dir_.file("c.ini") + " --run.dir=" +
                               dir_.file("a") + " --parallel.pp=2 --train.steps=4";
  const std::string log = dir_.file("limited.log");
  const int status = std::system(("timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 /bin/sh -c \"" +
                                  rank_cmd + "\" > " + log + " 2>&1").c_str());
  JobResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  std::ifstream in(log);
  r.output.assign(std::istreambuf_iterator<char>(in), {});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(train_message_lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find("pipelane train: cannot save checkpoint " + ckpt("a", 4) + ": rank "), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("(File too large); its partial files were removed; the newest complete checkpoint is " +
                          ckpt("a", 2)),
            std::string::npos) << r.output;
  EXPECT_TRUE(paths_ending_in(dir_.file("a"), ".saving").empty());
  EXPECT_FALSE(fs::exists(ckpt("a", 4)));
  // The restart resumes from step 2 and saves step 4.
  const JobResult again = train(2, "a", "--parallel.pp=2 --train.steps=4");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NO_THROW(CheckpointReader(ckpt("a", 4)));
}

}  // namespace
}  // namespace pipelane
