// The sandbox of a lane worker, one attack at a time (attack_plugin.c) against a real ProcessLane:
// what it may see and write, the cgroup limits that end it (named), the saved-state bound, and the
// fallback where the machine refuses the namespaces (degraded, said, never failed). Where this
// machine lacks a layer, the checks of that layer are skipped with the reason the lane reported.
#include <gtest/gtest.h>
#include <pthread.h>
#include <stdlib.h>

#include <csignal>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "lanes/isolation/lane_sandbox.h"
#include "lanes/isolation/process_lane.h"
#include "lanes/isolation/thread_lane.h"
#include "trainer/run/preemption.h"
#include "tests/lanes/builtin_io_test_env.h"

namespace pipelane {
namespace {

namespace fs = std::filesystem;
using testing_io::make_temp_dir;
using testing_io::read_file;
using testing_io::write_file;

// Every live process whose environment holds `marker` (this process's own environment as the
// kernel shows it predates setenv, so only the workers started since carry it).
std::vector<std::string> processes_marked(const std::string& marker) {
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string pid = entry.path().filename().string();
    if (pid.empty() || pid[0] < '0' || pid[0] > '9') continue;
    std::ifstream environ(entry.path() / "environ", std::ios::binary);
    const std::string env((std::istreambuf_iterator<char>(environ)), {});
    if (env.find(marker) == std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const auto close = line.rfind(')');
    if (close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z') found.push_back(line);
  }
  return found;
}

// A run directory as training leaves it, with the lane's output directory inside.
struct RunDir {
  std::string run = make_temp_dir("sandbox_run");
  std::string output = run + "/lanes/attack/rank0";
  std::string metrics = run + "/metrics.jsonl";
  std::string checkpoint = run + "/checkpoints/step_00000004/model_pp00_tp00.h5";
  RunDir() {
    fs::create_directories(output);
    fs::create_directories(fs::path(checkpoint).parent_path());
    write_file(metrics, "{\"step\": 1, \"loss\": 5.4865}\n");
    write_file(checkpoint, std::string(4096, 'w'));
  }
  ~RunDir() { fs::remove_all(run); }
};

struct Outcome {
  std::string error;  // "" : every step returned
  int steps = 0;
  nlohmann::json report;
  nlohmann::json sandbox;
};

Outcome run_attack(const std::string& mode, const RunDir& dir, int steps = 8,
                   std::map<std::string, std::string> more = {}, std::size_t arena = 16u << 20) {
  const std::string marker = "PIPELANE_SANDBOX_TEST=" + dir.run;
  ::setenv("PIPELANE_SANDBOX_TEST", dir.run.c_str(), 1);
  more["mode"] = mode;
  more["good_steps"] = "2";
  const std::unique_ptr<Backend> device = make_cpu_backend(1);
  const std::unique_ptr<Stream> stream = device->create_stream(StreamPriority::Low);
  Arena lane_arena("attack-arena", arena);
  LaneOptions options("attack1", more, "test.ini");
  LaneContext ctx{*device, *stream, lane_arena, options, dir.output, 0, 1};
  LaneWorkerLaunch launch;
  launch.command = {PIPELANE_BINARY, "lane-worker"};
  launch.plugin_path = PIPELANE_ATTACK_LANE;
  launch.hidden_dir = dir.run;
  Outcome out;
  {
    ProcessLane lane("attack1", "steps", launch);
    lane.set_limits({5, 30, 0, 8u << 20});
    lane.setup(ctx);
    out.sandbox = lane.sandbox();
    try {
      for (; out.steps < steps; ++out.steps) lane.step(ctx);
      (void)lane.save();
    } catch (const std::exception& e) {  // LaneError, or ArenaQuotaError
      out.error = e.what();
    }
    try {
      out.report = lane.report();
      lane.teardown(ctx);
    } catch (const std::exception&) {
    }
  }
  const std::vector<std::string> left = processes_marked(marker);
  EXPECT_TRUE(left.empty()) << mode << ": " << left.size() << " process(es) left, e.g. " << left[0];
  ::unsetenv("PIPELANE_SANDBOX_TEST");
  return out;
}

bool has(const nlohmann::json& sandbox, const std::string& cgroup) {
  for (const auto& c : sandbox["cgroups"])
    if (c == cgroup) return true;
  return false;
}

TEST(LaneSandbox, AWellBehavedLaneRunsAndSaysWhichLayersHoldIt) {
  RunDir dir;
  const Outcome out = run_attack("none", dir);
  EXPECT_EQ(out.error, "");
  EXPECT_EQ(out.steps, 8);
  EXPECT_EQ(out.report["steps"], 8);
  EXPECT_EQ(out.report["sandbox"], out.sandbox);
  ASSERT_TRUE(out.sandbox["degraded"].is_boolean());
  EXPECT_EQ(out.sandbox["degraded"].get<bool>(), out.sandbox.contains("missing")) << out.sandbox.dump();
  EXPECT_EQ(out.sandbox["seccomp"], "enforced");
  std::printf("sandbox on this machine: %s\n", out.sandbox.dump().c_str());
}

TEST(LaneSandbox, TheLaneCannotSignalAnythingOutsideItsPidNamespace) {
  RunDir dir;
  const Outcome out = run_attack("killer", dir);
  // It killed its own worker (kill(-1) reaches everything it can see): its own fault, quarantined.
  EXPECT_NE(out.error, "");
  if (out.sandbox["namespaces"].empty()) GTEST_SKIP() << "no namespaces: " << out.sandbox.dump();
  // And this process (the trainer), its parent and session are alive: the test goes on.
  EXPECT_EQ(::kill(::getppid(), 0), 0);
}

TEST(LaneSandbox, TrainingsFilesAndTheSystemAreOutOfReach) {
  RunDir dir;
  const Outcome out = run_attack("tamper", dir, 4);
  if (out.sandbox["namespaces"].empty()) GTEST_SKIP() << "no namespaces: " << out.sandbox.dump();
  EXPECT_EQ(out.error, "");
  EXPECT_EQ(out.report["tampered"], 0) << out.report.dump();
  EXPECT_EQ(read_file(dir.metrics), "{\"step\": 1, \"loss\": 5.4865}\n");
  EXPECT_EQ(read_file(dir.checkpoint), std::string(4096, 'w'));
  // Its own output directory is writable (the worker's log is there).
  EXPECT_TRUE(fs::exists(dir.output + "/worker.log"));
}

TEST(LaneSandbox, ADaemonDiesWithTheLane) {
  RunDir dir;
  const Outcome out = run_attack("daemon", dir, 4);
  EXPECT_NE(out.error.find("left 1 process(es) running"), std::string::npos) << out.error;
  // run_attack found no marked process; and the daemon's file stops growing.
  const std::string beat = dir.output + "/daemon.txt";
  const auto size = fs::exists(beat) ? fs::file_size(beat) : 0;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(fs::exists(beat) ? fs::file_size(beat) : 0, size);
}

TEST(LaneSandbox, SharedMemoryCountsAgainstTheMemoryLimit) {
  RunDir dir;
  const Outcome out = run_attack("memfd", dir, 4);
  if (!has(out.sandbox, "memory")) GTEST_SKIP() << "no memory cgroup: " << out.sandbox.dump();
  EXPECT_NE(out.error.find("its memory limit (cgroup memory"), std::string::npos) << out.error;
}

TEST(LaneSandbox, AForkBombStopsAtThePidsLimit) {
  RunDir dir;
  const Outcome out = run_attack("forkbomb", dir, 4);
  if (!has(out.sandbox, "pids")) GTEST_SKIP() << "no pids cgroup: " << out.sandbox.dump();
  EXPECT_NE(out.error.find("its process limit (cgroup pids.max = 256)"), std::string::npos) << out.error;
}

TEST(LaneSandbox, ASavedStateOverStateMbEndsTheLane) {
  RunDir dir;
  const Outcome out = run_attack("bigstate", dir, 2, {{"state_mb", "30"}});
  EXPECT_NE(out.error.find("more than [lanes] state_mb (8 MiB)"), std::string::npos) << out.error;
}

TEST(LaneSandbox, FramesItForgesOnTheSocketEndIt) {
  for (const char* mode : {"hugeframe", "forged", "forked"}) {
    RunDir dir;
    const Outcome out = run_attack(mode, dir, 6);
    EXPECT_NE(out.error.find("its worker sent"), std::string::npos) << mode << ": " << out.error;
  }
  // The forged reply carries the awaited sequence number and is alone: refused for its content.
  RunDir dir;
  const Outcome forged = run_attack("forged", dir, 6);
  EXPECT_NE(forged.error.find("step: its worker sent units nan"), std::string::npos) << forged.error;
}

TEST(LaneSandbox, WithoutNamespacesTheLaneRunsDegradedAndSaysSo) {
  RunDir dir;
  // A bwrap that fails as it does where user namespaces are off.
  const std::string fake = dir.run + "/bwrap";
  write_file(fake, "#!/bin/sh\necho 'bwrap: No permissions to create new namespace, likely because the kernel does "
                   "not allow non-privileged user namespaces.' >&2\nexit 1\n");
  fs::permissions(fake, fs::perms::owner_all);
  const std::unique_ptr<Backend> device = make_cpu_backend(1);
  const std::unique_ptr<Stream> stream = device->create_stream(StreamPriority::Low);
  Arena lane_arena("attack-arena", 1 << 20);
  LaneOptions options("attack1", {}, "test.ini");
  LaneContext ctx{*device, *stream, lane_arena, options, dir.output, 0, 1};
  for (const std::string& bwrap : {fake, std::string("/nonexistent/bwrap")}) {
    LaneWorkerLaunch launch;
    launch.command = {PIPELANE_BINARY, "lane-worker"};
    launch.plugin_path = PIPELANE_ATTACK_LANE;
    launch.bwrap = bwrap;
    ProcessLane lane("attack1", "steps", launch);
    lane.set_limits({5, 30, 0});
    testing::internal::CaptureStderr();
    lane.setup(ctx);
    const std::string said = testing::internal::GetCapturedStderr();
    EXPECT_EQ(lane.step(ctx), 1.0);
    const nlohmann::json sandbox = lane.report()["sandbox"];
    EXPECT_TRUE(sandbox["degraded"].get<bool>()) << sandbox.dump();
    EXPECT_TRUE(sandbox["namespaces"].empty());
    const std::string why = sandbox["missing"]["namespaces"];
    EXPECT_NE(why.find(bwrap == fake ? "No permissions to create new namespace" : "cannot be run"), std::string::npos)
        << why;
    EXPECT_NE(said.find("lane 'attack1': sandbox degraded, running without namespaces: " + why), std::string::npos)
        << said;
    lane.teardown(ctx);
  }
}

TEST(LaneSandbox, BwrapArgumentsHideTheRunDirectoryAndShowInputs) {
  SandboxRequest r;
  r.output_dir = "/run/x/lanes/a/rank0";
  r.hidden_dir = "/tmp";  // a directory that exists
  r.readable_paths = {"/tmp/input.txt"};
  const std::vector<std::string> a = bwrap_arguments(r);
  auto at = [&](const std::string& s) { return std::find(a.begin(), a.end(), s) - a.begin(); };
  EXPECT_LT(at("--ro-bind"), at("--tmpfs"));               // the read-only root first
  EXPECT_LT(at("/tmp/input.txt"), at("--bind"));          // inputs before the writable output
  EXPECT_NE(std::find(a.begin(), a.end(), "--unshare-net"), a.end());
  EXPECT_EQ(a.back(), "--");
  r.network = true;
  const std::vector<std::string> b = bwrap_arguments(r);
  EXPECT_EQ(std::find(b.begin(), b.end(), "--unshare-net"), b.end());
  const std::string dir = make_temp_dir("inputs");
  write_file(dir + "/in.txt", "x");
  EXPECT_EQ(hidden_option_paths({dir + "/in.txt", "relative", "/nonexistent", "/usr"}, ""),
            std::vector<std::string>{dir + "/in.txt"});
  fs::remove_all(dir);
}

// isolation = thread: a lane that ignores SIGTERM and unblocks it on its thread cannot stop the
// trainer's preemption: the signal is blocked in lane threads (again after each call) and taken by
// the trainer's own thread, which queues it even while its action is "ignore".
class SignalIgnoringLane final : public Lane {
 public:
  std::string name() const override { return "ignorer"; }
  std::string work_unit() const override { return "steps"; }
  void setup(LaneContext&) override {}
  double step(LaneContext&) override {
    std::signal(SIGTERM, SIG_IGN);
    std::signal(SIGUSR1, SIG_IGN);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    return 1;
  }
  bool finished() const override { return false; }
  std::string save() const override { return ""; }
  void load(const std::string&) override {}
  nlohmann::json report() const override { return nlohmann::json::object(); }
};

TEST(TrainingSignals, AThreadLaneThatIgnoresSigtermCannotStopThePreemptionCheckpoint) {
  const PreemptionSignal preemption;  // first: every thread made after it blocks the signals
  testing_io::LaneEnv env("ignorer", {});
  ThreadLane lane(std::make_unique<SignalIgnoringLane>());
  lane.set_limits({5, 5, 0});
  lane.setup(env.ctx);
  for (int i = 0; i < 3; ++i) lane.step(env.ctx);
  for (const int signal : {SIGUSR1, SIGTERM}) {
    ASSERT_EQ(::kill(::getpid(), signal), 0);
    int received = 0;
    for (int i = 0; i < 200 && (received = preemption.received()) != signal; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(received, signal);
  }
  lane.teardown(env.ctx);
}

}  // namespace
}  // namespace pipelane
