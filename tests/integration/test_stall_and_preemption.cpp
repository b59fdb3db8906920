// No silent hang, nothing lost on preemption, under mpirun at pp = 2:
// - a rank stopped with SIGSTOP ends the job within [run] timeout_s + a few seconds, with a line
//   naming the stopped rank and no process left behind;
// - SIGTERM to mpirun (a Slurm/cluster preemption) or SIGUSR1 (Slurm's --signal) makes every rank
//   finish its step, write a checkpoint and exit; resuming from it gives bit-identical losses.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "tests/integration/mpi_job.h"
#include "trainer/checkpoint/manifest.h"
#include "trainer/run/preemption.h"

namespace pipelane {
namespace {

using namespace test_support;
using Clock = std::chrono::steady_clock;

// Starts `mpirun ... pipelane train ARGS > log 2>&1` in its own process group; returns its pid.
pid_t start_job(const std::string& mpirun_flags, const std::string& args, const std::string& log) {
  const std::string cmd = "exec mpirun --allow-run-as-root --oversubscribe " + mpirun_flags + " -np 2 " +
                          build_dir() + "/pipelane train " + args + " > " + log + " 2>&1";
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// Waits for `pid` up to `limit_s`; returns its exit code, or -1 if it is still running (then it
// and its group are killed).
int wait_for_exit(pid_t pid, double limit_s, double* seconds) {
  const auto t0 = Clock::now();
  int status = 0;
  for (;;) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    *seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (done == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (*seconds > limit_s) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::size_t metric_rows(const std::string& run_dir) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

bool wait_for_rows(const std::string& run_dir, std::size_t rows, double limit_s) {
  const auto t0 = Clock::now();
  while (metric_rows(run_dir) < rows)
    if (std::chrono::duration<double>(Clock::now() - t0).count() > limit_s) return false;
    else std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return true;
}

// The pid of world rank `rank` of a job whose command line contains `marker`.
pid_t rank_pid(const std::string& marker, int rank) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cmdline(entry.path() / "cmdline");
    std::string args((std::istreambuf_iterator<char>(cmdline)), {});
    if (args.find(marker) == std::string::npos || args.find("mpirun") != std::string::npos) continue;
    std::ifstream env(entry.path() / "environ");
    std::string vars((std::istreambuf_iterator<char>(env)), {});
    if (vars.find(std::string("OMPI_COMM_WORLD_RANK=") + std::to_string(rank) + '\0') != std::string::npos)
      return static_cast<pid_t>(std::stoi(name));
  }
  return -1;
}

bool any_process_with(const std::string& marker) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::ifstream cmdline(entry.path() / "cmdline");
    std::string args((std::istreambuf_iterator<char>(cmdline)), {});
    if (args.find(marker) != std::string::npos) return true;
  }
  return false;
}

class StallAndPreemption : public ::testing::Test {
 protected:
  void SetUp() override {
    write_test_corpus(dir_.file("data.h5"));
    write_file(dir_.file("tiny.ini"), tiny_parallel_config(dir_.file("data.h5")));
  }
  std::string args(const std::string& run, int steps) {
    return "--config " + dir_.file("tiny.ini") + " --run.dir=" + run + " --parallel.pp=2 --train.steps=" +
           std::to_string(steps) + " --train.global_batch=8";
  }
  TempDir dir_;
};

TEST_F(StallAndPreemption, AStoppedRankEndsTheJobWithinTheTimeoutNamingIt) {
  const std::string run = dir_.file("stalled");
  const double timeout_s = 3;
  const pid_t job = start_job("", args(run, 1000000) + " --run.timeout_s=3", run + ".log");
  ASSERT_TRUE(wait_for_rows(run, 3, 120)) << "the job never got going";
  const pid_t victim = rank_pid(run, 1);
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGSTOP), 0);
  double seconds = 0;
  const int code = wait_for_exit(job, timeout_s + 20, &seconds);
  ASSERT_NE(code, -1) << "still running " << seconds << " s after the rank stopped";
  EXPECT_NE(code, 0);
  EXPECT_LT(seconds, timeout_s + 10) << "the job should end soon after timeout_s";
  std::ifstream in(run + ".log");
  const std::string log((std::istreambuf_iterator<char>(in)), {});
  // Rank 0 names rank 1: a transfer from it, the tied-embedding all-reduce with it, or the
  // gradient-sync barrier it never reached.
  EXPECT_NE(log.find("no progress for"), std::string::npos) << log;
  EXPECT_NE(log.find("rank 1"), std::string::npos) << log;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_FALSE(any_process_with(run)) << "a rank outlived the job";
}

// SIGTERM to mpirun: Open MPI forwards it to the ranks after odls_base_sigkill_timeout seconds and
// kills them that long after; the ranks need a moment to finish a step and save. The interrupted
// run is open-ended (the signal must find it running however loaded the machine is), with a
// constant learning rate so that its schedule does not depend on `steps`: resumed to step k + 10,
// it must give the losses of a run of k + 10 steps that was never stopped, bit for bit.
TEST_F(StallAndPreemption, SigtermToMpirunLeavesACheckpointThatResumesBitIdentically) {
  const std::string constant_lr = " --train.lr=1e-3 --train.min_lr=1e-3 --train.warmup_steps=0";
  for (const int signal : {SIGTERM, SIGUSR1}) {
    SCOPED_TRACE(signal == SIGTERM ? "SIGTERM" : "SIGUSR1");
    const std::string tag = signal == SIGTERM ? "term" : "usr1";
    const std::string full = dir_.file("full-" + tag), cut = dir_.file("cut-" + tag);
    const pid_t job = start_job("--mca odls_base_sigkill_timeout 2", args(cut, 1000000) + constant_lr, cut + ".log");
    ASSERT_TRUE(wait_for_rows(cut, 3, 120));
    ASSERT_EQ(kill(job, signal), 0);
    double seconds = 0;
    const int code = wait_for_exit(job, 60, &seconds);
    ASSERT_NE(code, -1) << "still running 60 s after the signal";
    std::ifstream in(cut + ".log");
    const std::string log((std::istreambuf_iterator<char>(in)), {});
    // The checkpoint of the last step logged. Only SIGUSR1 is sure to show its line: after a
    // SIGTERM mpirun may stop forwarding the ranks' output (the ranks skip step lines rather than
    // block on it, see ProgressLine), so the run directory is what tells.
    const int stopped_at = static_cast<int>(metric_rows(cut));
    ASSERT_TRUE(std::filesystem::exists(cut + "/checkpoints/" + checkpoint_dir_name(stopped_at)))
        << "exit " << code << "\n" << log;
    if (signal == SIGUSR1) {
      EXPECT_NE(log.find("stopped by SIGUSR1 after step " + std::to_string(stopped_at)), std::string::npos) << log;
      EXPECT_EQ(code, PreemptionSignal::kExitCode) << log;
    }
    // Resume (resume = auto) for ten more steps; the same losses as a run that never stopped.
    const int steps = stopped_at + 10;
    const JobResult resumed = run_job(2, args(cut, steps) + constant_lr, cut + "-resume.log");
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    ASSERT_EQ(run_job(2, args(full, steps) + constant_lr, full + ".log").exit_code, 0);
    const StepMetrics a = read_metrics(full), b = read_metrics(cut);
    ASSERT_EQ(a.loss.size(), static_cast<std::size_t>(steps));
    ASSERT_EQ(a.loss.size(), b.loss.size());
    for (std::size_t i = 0; i < a.loss.size(); ++i) EXPECT_EQ(a.loss[i], b.loss[i]) << "step " << i + 1;
  }
}

}  // namespace
}  // namespace pipelane
