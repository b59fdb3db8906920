// isolation = thread (ThreadLane, FloatingPointEnvironment), the output quota and the process-tree
// helpers. Process isolation is in test_process_lane.cpp.
#include <gtest/gtest.h>
#include <omp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include <atomic>
#include <cfenv>
#include <chrono>
#include <ctime>
#include <thread>

#include "lanes/isolation/step_timer.h"
#include "lanes/gap_scheduler.h"
#include "lanes/isolation/output_quota.h"
#include "lanes/isolation/process_tree.h"
#include "lanes/isolation/fp_environment.h"
#include "lanes/isolation/thread_lane.h"
#include "runtime/cpu/cpu_backend.h"
#include "tests/lanes/builtin_io_test_env.h"

namespace pipelane {
namespace {

using testing_io::LaneEnv;

#if defined(__x86_64__) || defined(__i386__)
constexpr unsigned kFlushBits = 0x8040;  // FTZ (bit 15) and DAZ (bit 6) of MXCSR
unsigned flush_bits() { return _mm_getcsr() & kFlushBits; }
void clear_flush_bits() { _mm_setcsr(_mm_getcsr() & ~kFlushBits); }
#else
unsigned flush_bits() { return 0; }
void clear_flush_bits() {}
#endif

// What a lane saw at the start of each step, and what it then broke.
struct Seen {
  int rounding = -1;
  unsigned flush = 0;
  std::thread::id thread;
};

class EnvironmentVandal : public Lane {
 public:
  explicit EnvironmentVandal(std::vector<Seen>* seen) : seen_(seen) {}
  std::string name() const override { return "vandal"; }
  std::string work_unit() const override { return "steps"; }
  void setup(LaneContext&) override {}
  double step(LaneContext&) override {
    seen_->push_back({std::fegetround(), flush_bits(), std::this_thread::get_id()});
    std::fesetround(FE_UPWARD);
    clear_flush_bits();
    omp_set_num_threads(7);  // on its own thread: nothing of training's
    return 1;
  }
  bool finished() const override { return false; }
  std::string save() const override { return ""; }
  void load(const std::string&) override {}
  nlohmann::json report() const override { return {{"steps", seen_->size()}}; }

 private:
  std::vector<Seen>* seen_;
};

TEST(FloatingPointEnvironment, RestoresRoundingAndFlushToZero) {
  LaneEnv env("env", {});  // a CPU backend: FTZ/DAZ on
  const FloatingPointEnvironment saved = FloatingPointEnvironment::capture();
  const unsigned flush = flush_bits();
  EXPECT_FALSE(saved.restore());  // nothing changed yet
  std::fesetround(FE_DOWNWARD);
  clear_flush_bits();
  EXPECT_TRUE(saved.restore());
  EXPECT_EQ(std::fegetround(), FE_TONEAREST);
  EXPECT_EQ(flush_bits(), flush);
  // Sticky exception flags are not a change worth restoring.
  volatile double zero = 0.0;
  volatile double inf = 1.0 / zero;
  (void)inf;
  EXPECT_FALSE(saved.restore());
}

TEST(ThreadLane, EveryStepStartsFromTrainingsEnvironmentAndTrainingsThreadIsUntouched) {
  LaneEnv env("vandal", {});
  const unsigned flush = flush_bits();
  ASSERT_NE(flush, 0u) << "the CPU backend turns FTZ/DAZ on";
  const int threads = omp_get_max_threads();
  std::vector<Seen> seen;
  ThreadLane lane(std::make_unique<EnvironmentVandal>(&seen));
  lane.setup(env.ctx);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(lane.step(env.ctx), 1.0);
  ASSERT_EQ(seen.size(), 3u);
  for (const Seen& s : seen) {
    EXPECT_EQ(s.rounding, FE_TONEAREST);
    EXPECT_EQ(s.flush, flush);  // inherited from the creating thread, and restored after each step
    EXPECT_NE(s.thread, std::this_thread::get_id());  // training's thread never runs lane code
    EXPECT_EQ(s.thread, seen[0].thread);
  }
  EXPECT_EQ(std::fegetround(), FE_TONEAREST);
  EXPECT_EQ(flush_bits(), flush);
  EXPECT_EQ(omp_get_max_threads(), threads);
  EXPECT_EQ(lane.report()["steps"], 3);
  lane.teardown(env.ctx);
  EXPECT_EQ(lane.report()["steps"], 3);  // the last report outlives the thread
  EXPECT_THROW(lane.step(env.ctx), LaneError);
}

// Steps sleep for `step_ms` after `fast_steps` quick ones.
class Sleeper : public Lane {
 public:
  Sleeper(int fast_steps, int step_ms) : fast_steps_(fast_steps), step_ms_(step_ms) {}
  std::string name() const override { return "sleeper"; }
  std::string work_unit() const override { return "steps"; }
  void setup(LaneContext&) override {}
  double step(LaneContext&) override {
    if (steps_++ >= fast_steps_) std::this_thread::sleep_for(std::chrono::milliseconds(step_ms_));
    return 1;
  }
  bool finished() const override { return false; }
  std::string save() const override { return std::to_string(steps_); }
  void load(const std::string&) override {}
  nlohmann::json report() const override { return {{"steps", steps_}}; }

 private:
  int fast_steps_, step_ms_, steps_ = 0;
};

TEST(ThreadLane, AStepPastItsDeadlineIsAbandonedAndTheCallerGoesOn) {
  auto env = std::make_unique<LaneEnv>("sleeper", std::map<std::string, std::string>{});
  auto lane = std::make_unique<ThreadLane>(std::make_unique<Sleeper>(2, 3000));
  lane->set_limits({0.1, 5, 0});
  lane->setup(env->ctx);
  lane->step(env->ctx);
  lane->step(env->ctx);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    lane->step(env->ctx);
    FAIL() << "expected LaneTimeout";
  } catch (const LaneTimeout& error) {
    EXPECT_NE(std::string(error.what()).find("step did not return within its deadline of 0.1 s"), std::string::npos)
        << error.what();
  }
  // Ended on time: the deadline, not the 3 s step (bounded generously for a loaded machine).
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.5);
  EXPECT_TRUE(lane->abandoned());
  EXPECT_THROW(lane->save(), LaneError);
  EXPECT_EQ(lane->report()["steps"], nullptr);  // never reported: nothing cached
  lane->teardown(env->ctx);                     // nothing to do, and no wait
  // The abandoned step still uses its context: like the scheduler, keep both alive.
  (void)lane.release();
  (void)env.release();
}

TEST(ThreadLane, StepCostIsTheLanesOwnThreadTime) {
  LaneEnv env("sleeper", {});
  ThreadLane lane(std::make_unique<Sleeper>(0, 30));
  lane.setup(env.ctx);
  lane.step(env.ctx);
  // Sleeping 30 ms costs (almost) no CPU: the scheduler can tell waiting from working.
  const LaneStepCost cost = lane.last_step_cost();
  EXPECT_LT(cost.cpu_s, 0.015);
  EXPECT_GE(cost.wall_s, 0.029);
  EXPECT_LE(cost.waiting_s, cost.wall_s);  // sleeping is not waiting for a CPU (-1: not measured)
}

double thread_cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Each step does 200 us of CPU work, however long the OS makes it take.
class FixedWork : public Lane {
 public:
  std::string name() const override { return "fixed"; }
  std::string work_unit() const override { return "steps"; }
  void setup(LaneContext&) override {}
  double step(LaneContext&) override {
    const double end = thread_cpu_now() + 200e-6;
    while (thread_cpu_now() < end) {
    }
    return 1;
  }
  bool finished() const override { return false; }
  std::string save() const override { return ""; }
  void load(const std::string&) override {}
  nlohmann::json report() const override { return nlohmann::json::object(); }
};

TEST(ThreadLane, AWellBehavedLaneOnAnOversubscribedMachineIsNotQuarantined) {
  // Busy threads on every core preempt the lane's steps over and over: a step then takes many
  // times its 200 us on the clock, but its own CPU time does not grow. That is the machine.
  std::atomic<bool> stop{false};
  std::vector<std::thread> hogs;
  for (unsigned i = 0; i < 2 * std::max(1u, std::thread::hardware_concurrency()); ++i)
    hogs.emplace_back([&stop] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  const std::unique_ptr<Backend> backend = make_cpu_backend(1);
  std::vector<LaneSpec> specs;
  specs.push_back({std::make_unique<FixedWork>(), LaneOptions("fixed", {}, "test.ini")});
  GapSchedulerOptions options;
  options.profile_iterations = 1;
  options.lane_memory_bytes = 1 << 16;
  std::vector<std::string> messages;
  GapScheduler scheduler(*backend, std::move(specs), options, std::chrono::steady_clock::now(),
                         [&](const std::string& line) { messages.push_back(line); });
  scheduler.calibrate();
  const auto t0 = std::chrono::steady_clock::now();
  for (int it = 0; std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(1500); ++it) {
    const auto arrival = std::chrono::steady_clock::now() + std::chrono::milliseconds(3);
    scheduler.fill(it, 0, WaitKind::P2PWait, [arrival] { return std::chrono::steady_clock::now() >= arrival; });
    scheduler.end_iteration(it);
  }
  stop = true;
  for (std::thread& hog : hogs) hog.join();
  EXPECT_FALSE(scheduler.quarantined("fixed")) << messages[0];
  EXPECT_GT(scheduler.summary().lanes.at("fixed").steps, 50);
}

TEST(OutputQuota, CountsEveryFileUnderTheDirectory) {
  const std::string dir = testing_io::make_temp_dir("quota");
  std::filesystem::create_directories(dir + "/sub");
  testing_io::write_file(dir + "/a.txt", std::string(3000, 'a'));
  testing_io::write_file(dir + "/sub/b.txt", std::string(2000, 'b'));
  EXPECT_EQ(directory_bytes(dir), 5000u);
  OutputQuota roomy(dir, 6000, 0);
  EXPECT_NO_THROW(roomy.check());
  OutputQuota tight(dir, 4000, 3600);  // walks once, then only every hour...
  try {
    tight.check();
    FAIL() << "expected LaneError";
  } catch (const LaneError& error) {
    EXPECT_NE(std::string(error.what()).find("holds 5000 bytes, its quota is 4000 bytes ([lanes] output_mb)"),
              std::string::npos)
        << error.what();
  }
  std::filesystem::remove(dir + "/a.txt");
  EXPECT_NO_THROW(tight.check());  // within its interval: not walked again
  EXPECT_EQ(tight.last_size(), 5000u);
  EXPECT_NO_THROW(tight.check(true));  // walked now
  EXPECT_EQ(tight.last_size(), 2000u);
  std::filesystem::remove_all(dir);
}

TEST(ProcessTree, KillsEveryDescendantIncludingOnesThatLeftTheSession) {
  // A child that forks a grandchild into a new session, which spins.
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    const pid_t middle = ::fork();
    if (middle == 0) {
      ::setsid();
      if (::fork() == 0) {
        const char c = 'x';
        (void)!::write(ready[1], &c, 1);
        for (;;) ::pause();
      }
      ::_exit(0);
    }
    ::waitpid(middle, nullptr, 0);  // the grandchild is an orphan, adopted by this subreaper
    for (;;) ::pause();
  }
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  std::vector<pid_t> below;
  for (int i = 0; i < 200 && (below = live_descendants(child)).size() != 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(below.size(), 1u);  // the middle one exited; the grandchild is still there
  const pid_t grandchild = below[0];
  const int status = kill_process_tree(child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << describe_wait_status(status);
  // Gone (or a zombie waiting for whoever reaps orphans here).
  std::ifstream stat("/proc/" + std::to_string(grandchild) + "/stat");
  std::string line;
  if (std::getline(stat, line)) {
    EXPECT_NE(line.find(") Z"), std::string::npos) << line;
  }
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST(ProcessTree, NamesSignalsAndExitStatuses) {
  EXPECT_EQ(signal_name(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(describe_wait_status(0), "exited with status 0");
  EXPECT_EQ(describe_wait_status(SIGABRT), "was killed by signal 6 (SIGABRT)");
}

TEST(StepCharge, WhatTheLanesOtherThreadsTookOnItsCoresIsTheStepsOwnTime) {
  // One core: 3 ms of another thread's time in a call whose step ran 0.1 ms of CPU in 3.2 ms of wall
  // time, 3.1 ms of it waiting for the CPU: the wait was the lane's own thread, not the machine.
  const LaneStepCost one = charge_other_threads({0.0032, 0.0001, 5, 0.0031}, 0.003, 1);
  EXPECT_DOUBLE_EQ(one.cpu_s, 0.0031);
  EXPECT_NEAR(one.waiting_s, 0.0001, 1e-12);
  EXPECT_EQ(one.involuntary_switches, 5);
  // Two cores: another thread busy for the whole call had a core of its own; nothing is charged.
  const LaneStepCost two = charge_other_threads({0.0032, 0.0001, 5, 0.0031}, 0.0032, 2);
  EXPECT_DOUBLE_EQ(two.cpu_s, 0.0001);
  EXPECT_DOUBLE_EQ(two.waiting_s, 0.0031);
  // Never a negative wait, and no run-queue clock (-1) stays unmeasured.
  EXPECT_DOUBLE_EQ(charge_other_threads({0.001, 0.0005, 0, 0.0002}, 0.004, 1).waiting_s, 0.0);
  const LaneStepCost unmeasured = charge_other_threads({0.001, 0.0005, 3, -1}, 0.002, 1);
  EXPECT_DOUBLE_EQ(unmeasured.waiting_s, -1);
  EXPECT_DOUBLE_EQ(unmeasured.cpu_s, 0.0025);
  // A lane with no other threads is charged nothing.
  EXPECT_DOUBLE_EQ(charge_other_threads({0.001, 0.0009, 0, 0.0001}, 0, 1).cpu_s, 0.0009);
}

}  // namespace
}  // namespace pipelane
