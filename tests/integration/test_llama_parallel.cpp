// The Llama family through every parallelism of `pipelane train` (arch = llama: RMSNorm, RoPE,
// SwiGLU, 4 heads on 2 kv heads, an untied head): pp with every schedule (ZB-H1's split
// backward included), tp (q and kv heads split across the ranks), dp and tp x pp give the
// single-process losses and gradient norms to 1e-5; lanes on and off are bit-identical at pp 2;
// a run killed with SIGKILL after a checkpoint resumes to the straight run's losses bit for bit;
// a checkpoint saved at pp 2 loads at tp 2 and in one process (resharding).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <csignal>
#include <filesystem>
#include <thread>

#include "tests/integration/mpi_job.h"
#include "tests/trainer/checkpoint/test_checkpoint_support.h"

namespace pipelane {
namespace {

using namespace test_support;

const char* const kLlama = " --model.arch=llama --model.kv_heads=2 --model.ffn_multiple_of=16";

struct LlamaCase {
  const char* name;
  int ranks;
  const char* args;
};

class LlamaParallel : public ::testing::TestWithParam<LlamaCase> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    write_test_corpus(dir_->file("data.h5"));
    write_file(dir_->file("tiny.ini"), tiny_parallel_config(dir_->file("data.h5")));
    const JobResult ref = run_job(0, "--config " + dir_->file("tiny.ini") + kLlama + " --run.dir=" + dir_->file("ref"),
                                  dir_->file("ref.log"));
    ASSERT_EQ(ref.exit_code, 0) << ref.output;
    reference_ = new StepMetrics(read_metrics(dir_->file("ref")));
  }
  static void TearDownTestSuite() {
    delete reference_;
    delete dir_;
  }
  static TempDir* dir_;
  static StepMetrics* reference_;
};
TempDir* LlamaParallel::dir_ = nullptr;
StepMetrics* LlamaParallel::reference_ = nullptr;

TEST_P(LlamaParallel, MatchesSingleProcess) {
  const LlamaCase& c = GetParam();
  const std::string run = dir_->file(c.name);
  const JobResult job =
      run_job(c.ranks, "--config " + dir_->file("tiny.ini") + kLlama + " --run.dir=" + run + " " + c.args, run + ".log");
  ASSERT_EQ(job.exit_code, 0) << job.output;
  const StepMetrics got = read_metrics(run);
  ASSERT_EQ(got.loss.size(), 5u);
  ASSERT_EQ(reference_->loss.size(), 5u);
  // As test_parallel_equivalence.cpp: the same arithmetic summed in another order.
  double worst = 0;
  for (std::size_t i = 0; i < got.loss.size(); ++i) {
    EXPECT_NEAR(got.loss[i], reference_->loss[i], 1e-5 * reference_->loss[i]) << "step " << i + 1;
    EXPECT_NEAR(got.grad_norm[i], reference_->grad_norm[i], 1e-5 * reference_->grad_norm[i]) << "step " << i + 1;
    worst = std::max({worst, std::fabs(got.loss[i] / reference_->loss[i] - 1),
                      std::fabs(got.grad_norm[i] / reference_->grad_norm[i] - 1)});
  }
  std::printf("[ llama %s ] max relative difference of loss / grad norm vs one process: %.2e\n", c.name, worst);
}

const LlamaCase kCases[] = {
    {"tp2_pp2_1f1b", 4, "--parallel.tp=2 --parallel.pp=2"},
    {"tp2_pp2_zbh1", 4, "--parallel.tp=2 --parallel.pp=2 --parallel.schedule=zb-h1"},
    {"pp2_gpipe", 2, "--parallel.pp=2 --parallel.schedule=gpipe"},
    {"pp2_interleaved", 2, "--parallel.pp=2 --parallel.schedule=interleaved --parallel.virtual_stages=2"},
    {"pp2_zbh1", 2, "--parallel.pp=2 --parallel.schedule=zb-h1"},
    {"tp2", 2, "--parallel.tp=2"},
    {"dp2", 2, "--parallel.dp=2"},
};
INSTANTIATE_TEST_SUITE_P(Grid, LlamaParallel, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(LlamaLanes, LossesAreBitIdenticalWithLanesOnAndOffAtPp2) {
  TempDir dir;
  write_test_corpus(dir.file("data.h5"));
  write_file(dir.file("tiny.ini"), tiny_parallel_config(dir.file("data.h5")));
  const auto train = [&](const std::string& name, const std::string& extra) {
    const JobResult r = run_job(2, "--config " + dir.file("tiny.ini") + kLlama + " --run.dir=" + dir.file(name) +
                                       " --parallel.pp=2 --train.steps=4 " + extra,
                                dir.file(name + ".log"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return read_metrics(dir.file(name));
  };
  const StepMetrics off = train("off", "");
  const StepMetrics on = train("on", "--lanes.enabled=pagerank --lanes.profile_iterations=1 "
                                     "--lane.pagerank.generate=rmat --lane.pagerank.scale=10");
  ASSERT_EQ(off.loss.size(), 4u);
  EXPECT_EQ(on.loss, off.loss);
  EXPECT_EQ(on.grad_norm, off.grad_norm);
}

TEST(LlamaCheckpoint, KilledWithSigkillResumesBitIdentical) {
  namespace fs = std::filesystem;
  TempDir dir;
  write_test_corpus(dir.file("data.h5"));
  // 40 steps, a checkpoint every 2: the kill after step 4's lands while many steps are left.
  write_file(dir.file("c.ini"), tiny_checkpoint_config(dir.file("data.h5"), 40, 2));
  const std::string args = "--config " + dir.file("c.ini") + kLlama;
  ASSERT_EQ(run_job(0, args + " --run.dir=" + dir.file("straight"), dir.file("straight.log")).exit_code, 0);
  // The killed run: SIGKILL once the step-4 checkpoint is complete (its manifest is written last).
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::string cmd = build_dir() + "/pipelane train " + args + " --run.dir=" + dir.file("killed") + " > " +
                            dir.file("killed.log") + " 2>&1";
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const fs::path manifest = dir.file("killed/checkpoints/" + checkpoint_dir_name(4) + "/manifest.json");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!fs::exists(manifest) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(fs::exists(manifest));
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the run ended before it was killed";
  const JobResult resumed = run_job(0, args + " --run.dir=" + dir.file("killed"), dir.file("resumed.log"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(loss_texts(dir.file("straight")), loss_texts(dir.file("killed")));
  expect_same_tensors(dir.file("straight/checkpoints/" + checkpoint_dir_name(40)),
                      dir.file("killed/checkpoints/" + checkpoint_dir_name(40)));
}

}  // namespace
}  // namespace pipelane

namespace pipelane {
namespace {

// Resharding: saved at pp 2, loaded at tp 2 (q heads, kv heads and the MLP split across ranks)
// and in one process; saving again right away reproduces every tensor.
TEST(LlamaCheckpoint, SavedAtPp2LoadsAtTp2AndInOneProcess) {
  TempDir dir;
  write_test_corpus(dir.file("data.h5"));
  write_file(dir.file("c.ini"), tiny_checkpoint_config(dir.file("data.h5"), 2, 2));
  const auto train = [&](int ranks, const std::string& run, const std::string& extra) {
    return run_job(ranks, "--config " + dir.file("c.ini") + kLlama + " --run.dir=" + dir.file(run) + " " + extra,
                   dir.file(run + ".log"));
  };
  const auto ckpt = [&](const std::string& run) { return dir.file(run + "/checkpoints/" + checkpoint_dir_name(2)); };
  ASSERT_EQ(train(2, "pp2", "--parallel.pp=2").exit_code, 0);
  const JobResult tp = train(2, "tp2", "--parallel.tp=2 --run.resume=" + ckpt("pp2"));
  ASSERT_EQ(tp.exit_code, 0) << tp.output;
  expect_same_tensors(ckpt("pp2"), ckpt("tp2"));
  const JobResult one = train(0, "one", "--run.resume=" + ckpt("tp2"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  expect_same_tensors(ckpt("pp2"), ckpt("one"));
}

}  // namespace
}  // namespace pipelane
