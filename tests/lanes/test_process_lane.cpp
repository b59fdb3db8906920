// isolation = process: ProcessLane and its worker (`pipelane lane-worker`) against a plugin that
// misbehaves in every way it can think of, the example plugin inside the gap scheduler, and the
// command lane in a worker (processes that leave their session; a flood of output).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cfenv>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "lanes/gap_scheduler.h"
#include "lanes/isolation/plugin_probe.h"
#include "lanes/isolation/process_lane.h"
#include "runtime/cpu/cpu_backend.h"
#include "tests/lanes/builtin_io_test_env.h"

namespace pipelane {
namespace {

using testing_io::LaneEnv;

LaneWorkerLaunch worker(const std::string& plugin, bool allow_children = false) {
  LaneWorkerLaunch launch;
  launch.command = {PIPELANE_BINARY, "lane-worker"};
  launch.plugin_path = plugin;
  launch.allow_child_processes = allow_children;
  return launch;
}

// A process that exists and has not exited (a zombie waits only for its reaper).
bool running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z' && line[close + 2] != 'X';
}

char state_of(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() ? 0 : line[close + 2];
}

// Whether the freezer cgroup of `pid` holds it frozen (v1 freezer.state, or v2 cgroup.events).
bool frozen(pid_t pid) {
  std::ifstream groups("/proc/" + std::to_string(pid) + "/cgroup");
  for (std::string line; std::getline(groups, line);) {
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers == "freezer") {
      std::ifstream state("/sys/fs/cgroup/freezer" + path + "/freezer.state");
      std::string word;
      if (state >> word && word == "FROZEN") return true;
    }
    if (controllers.empty()) {
      for (const char* root : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
        std::ifstream events(root + path + "/cgroup.events");
        for (std::string key, value; events >> key >> value;)
          if (key == "frozen" && value == "1") return true;
      }
    }
  }
  return false;
}

// Every live process whose environment holds `marker`: the workers started since it was set
// (setenv), and whatever they started, whichever PID namespace they are in.
std::vector<pid_t> processes_marked(const std::string& marker) {
  std::vector<pid_t> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] < '0' || name[0] > '9') continue;
    std::ifstream environ(entry.path() / "environ", std::ios::binary);
    const std::string env((std::istreambuf_iterator<char>(environ)), {});
    const pid_t pid = std::stoi(name);
    if (env.find(marker) != std::string::npos && running(pid)) found.push_back(pid);
  }
  return found;
}

// The pid, as this process sees it, of the process below `root` that its own PID namespace calls
// `inner` (the last field of /proc/PID/status NSpid); `inner` itself without a namespace.
pid_t outer_pid(pid_t root, pid_t inner) {
  std::vector<pid_t> all = {root};
  for (std::size_t i = 0; i < all.size() && all.size() < 10000; ++i) {
    const std::string task_dir = "/proc/" + std::to_string(all[i]) + "/task";
    std::error_code ec;
    for (const auto& task : std::filesystem::directory_iterator(task_dir, ec)) {
      std::ifstream children(task.path() / "children");
      for (pid_t child; children >> child;) all.push_back(child);
    }
    std::ifstream status("/proc/" + std::to_string(all[i]) + "/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("NSpid:", 0) == 0 && std::stoi(line.substr(line.find_last_of(" \t") + 1)) == inner) return all[i];
  }
  return inner;
}

std::vector<pid_t> pids_in(const std::string& path) {
  std::vector<pid_t> pids;
  std::ifstream in(path);
  for (pid_t pid; in >> pid;) pids.push_back(pid);
  return pids;
}

struct Outcome {
  std::string kind;  // "none", "timeout", "crash", "quota", "lane", "other"
  std::string message;
  int steps = 0;     // successful steps
};

// Two good steps, then up to `max_steps` more until one fails.
Outcome run_hostile(LaneEnv& env, int max_steps = 6, double step_deadline_s = 0.3) {
  ProcessLane lane("hostile", "steps", worker(PIPELANE_HOSTILE_LANE));
  lane.set_limits({step_deadline_s, 30, 0});
  lane.setup(env.ctx);
  Outcome outcome{"none", "", 0};
  for (int i = 0; i < 2 + max_steps && outcome.kind == "none"; ++i) {
    try {
      lane.step(env.ctx);
      ++outcome.steps;
    } catch (const LaneTimeout& e) {
      outcome = {"timeout", e.what(), outcome.steps};
    } catch (const LaneCrash& e) {
      outcome = {"crash", e.what(), outcome.steps};
    } catch (const ArenaQuotaError& e) {
      outcome = {"quota", e.what(), outcome.steps};
    } catch (const LaneError& e) {
      outcome = {"lane", e.what(), outcome.steps};
    } catch (const std::exception& e) {
      outcome = {"other", e.what(), outcome.steps};
    }
  }
  const pid_t keeper = lane.worker_pid();
  try {
    lane.teardown(env.ctx);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "teardown: " << e.what();
  }
  EXPECT_EQ(lane.worker_pid(), -1);
  if (keeper > 0) {
    EXPECT_FALSE(running(keeper));
  }
  return outcome;
}

struct HostileCase {
  std::string mode;
  std::string kind;
  std::string message_part;
};

void PrintTo(const HostileCase& c, std::ostream* os) { *os << c.mode; }

class HostilePlugin : public ::testing::TestWithParam<HostileCase> {};

TEST_P(HostilePlugin, EndsInTheWorkerNamedAndLeavesNoProcessBehind) {
  const HostileCase& c = GetParam();
  const std::string marker = "PIPELANE_PROCESS_LANE_TEST=" + c.mode + std::to_string(::getpid());
  ::setenv("PIPELANE_PROCESS_LANE_TEST", (c.mode + std::to_string(::getpid())).c_str(), 1);
  LaneEnv env("hostile", {{"mode", c.mode}, {"good_steps", "2"}, {"step_us", "100"}}, 16u << 20);
  const int threads = omp_get_max_threads();  // as the CPU backend of env left it
  const Outcome outcome = run_hostile(env, c.mode == "malloc" ? 80 : 6);  // 2 MiB a step, 64 MiB allowed
  // "a|b": either (where the outcome depends on the worker's memory layout).
  EXPECT_NE(("|" + c.kind + "|").find("|" + outcome.kind + "|"), std::string::npos) << outcome.message;
  EXPECT_NE(outcome.message.find(c.message_part), std::string::npos) << outcome.message;
  EXPECT_GE(outcome.steps, 2) << outcome.message;
  // Nothing the lane started survives it: its own process and every child it forked (in its PID
  // namespace their pids are the namespace's: found by the marker in their environment instead).
  const std::vector<pid_t> pids = pids_in(env.dir + "/pids.txt");
  EXPECT_GE(pids.size(), 1u);
  const std::vector<pid_t> left = processes_marked(marker);
  EXPECT_TRUE(left.empty()) << "pid " << left[0] << " of mode " << c.mode << " still runs";
  ::unsetenv("PIPELANE_PROCESS_LANE_TEST");
  // And nothing of it reached this process.
  EXPECT_EQ(std::fegetround(), FE_TONEAREST);
  EXPECT_EQ(omp_get_max_threads(), threads);
}

INSTANTIATE_TEST_SUITE_P(
    EveryMode, HostilePlugin,
    ::testing::Values(HostileCase{"segfault", "crash", "was killed by signal 11 (SIGSEGV)"},
                      HostileCase{"abort", "crash", "was killed by signal 6 (SIGABRT)"},
                      HostileCase{"exit0", "crash", "exited with status 0"},
                      HostileCase{"spin", "timeout", "step did not return within its deadline of 0.3 s"},
                      HostileCase{"block_read", "timeout", "everything it started were killed"},
                      HostileCase{"heap_overflow", "crash", "was killed by signal"},
                      // Past the arena lies whatever the worker mapped before it: the write may crash at once, or
                      // run on through writable memory until its deadline.
                      HostileCase{"arena_overflow", "crash|timeout", "its worker process"},
                      HostileCase{"child", "lane", "its step left 1 process(es) running"},
                      HostileCase{"setsid_child", "lane", "its step left 1 process(es) running"},
                      HostileCase{"malloc", "crash", "(address space capped at"},
                      HostileCase{"fesetround", "none", ""},
                      HostileCase{"threads", "none", ""}),
    [](const ::testing::TestParamInfo<HostileCase>& info) { return info.param.mode; });

TEST(ProcessLane, SetupErrorsComeBackAsLaneErrorsWithTheirSource) {
  LaneEnv env("hostile", {{"colour", "red"}});
  ProcessLane lane("hostile", "steps", worker(PIPELANE_HOSTILE_LANE));
  lane.set_limits({1, 30, 0});
  try {
    lane.setup(env.ctx);
    FAIL() << "expected LaneError";
  } catch (const LaneError& e) {
    EXPECT_STREQ(e.what(), "test.ini: [lane.hostile] colour: unknown key for lane 'hostile'");
  }
}

TEST(ProcessLane, AWorkerThatCannotStartIsALaneError) {
  LaneEnv env("hostile", {});
  LaneWorkerLaunch launch = worker(PIPELANE_HOSTILE_LANE);
  launch.command = {"/nonexistent/pipelane", "lane-worker"};
  ProcessLane lane("hostile", "steps", launch);
  try {
    lane.setup(env.ctx);
    FAIL() << "expected LaneError";
  } catch (const LaneError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot start its worker /nonexistent/pipelane"), std::string::npos)
        << e.what();
  }
}

TEST(PluginProbe, DescribesAPluginWithoutLoadingItHere) {
  const std::vector<std::string> command = {PIPELANE_BINARY, "lane-worker"};
  const PluginDescription d = describe_plugin_in_worker(PIPELANE_HOSTILE_LANE, command);
  EXPECT_EQ(d.name, "hostile");
  EXPECT_EQ(d.work_unit, "steps");
  EXPECT_EQ(::dlopen(PIPELANE_HOSTILE_LANE, RTLD_NOW | RTLD_NOLOAD), nullptr);  // its code never ran here
  // The loader's own messages, from the worker.
  EXPECT_THROW(
      {
        try {
          describe_plugin_in_worker("/nonexistent/libnothing.so", command);
        } catch (const LaneError& e) {
          EXPECT_STREQ(e.what(), "/nonexistent/libnothing.so: no such lane plugin file");
          throw;
        }
      },
      LaneError);
  try {
    describe_plugin_in_worker(PIPELANE_BAD_PLUGIN_ABI7, command);
    FAIL() << "expected LaneError";
  } catch (const LaneError& e) {
    EXPECT_EQ(std::string(e.what()), std::string(PIPELANE_BAD_PLUGIN_ABI7) + ": built for lane ABI 7, this pipelane speaks 1 to 2");
  }
  // A plugin known only by its description runs in a worker whatever the isolation mode.
  LaneRegistry registry;
  registry.add_worker_plugin(d.name, {d.work_unit, PIPELANE_HOSTILE_LANE});
  EXPECT_THROW(registry.create("hostile"), LaneError);
  LaneIsolationOptions isolation;  // Thread
  isolation.worker_command = command;
  std::vector<LaneSpec> specs = make_lane_specs(registry, {"hostile"}, {}, "test.ini", isolation);
  ASSERT_EQ(specs.size(), 1u);
  auto* lane = dynamic_cast<ProcessLane*>(specs[0].lane.get());
  ASSERT_NE(lane, nullptr);
  EXPECT_EQ(lane->work_unit(), "steps");
}

// The example plugin, in a worker, inside the gap scheduler: same results as in-process, and its
// progress saved and restored through the worker.
TEST(ProcessLane, RunsInsideTheGapSchedulerAndSavesThroughTheWorker) {
  const std::string dir = testing_io::make_temp_dir("process_wc");
  const std::string input = dir + "/input.txt";
  testing_io::write_file(input, "hello world\n  pipeline   bubbles are\twasted\nfill them now");
  LaneRegistry registry;
  registry.load_plugin(PIPELANE_EXAMPLE_LANE);
  LaneIsolationOptions isolation;
  isolation.mode = LaneIsolationOptions::Mode::Auto;  // a plugin: a worker
  isolation.worker_command = {PIPELANE_BINARY, "lane-worker"};
  const std::map<std::string, std::map<std::string, std::string>> sections{
      {"word_count", {{"input", input}, {"chunk_bytes", "4"}}}};
  GapSchedulerOptions options;
  options.profile_iterations = 1;
  options.lane_memory_bytes = 1 << 16;
  options.output_root = dir + "/run";
  auto fill_until_done = [](GapScheduler& scheduler) {
    for (int it = 0; it < 400 && !scheduler.summary().lanes.at("word_count").finished; ++it) {
      const auto arrival = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
      scheduler.fill(it, 0, WaitKind::Warmup, [arrival] { return std::chrono::steady_clock::now() >= arrival; });
      scheduler.end_iteration(it);
    }
  };
  std::string saved;
  const std::unique_ptr<Backend> backend = make_cpu_backend(1);
  {
    std::vector<std::string> messages;
    GapScheduler scheduler(*backend, make_lane_specs(registry, {"word_count"}, sections, "lanes.ini", isolation),
                           options, std::chrono::steady_clock::now(),
                           [&](const std::string& line) { messages.push_back(line); });
    scheduler.calibrate();
    ASSERT_TRUE(messages.empty()) << messages[0];
    saved = scheduler.save_lanes().at("word_count");
    EXPECT_FALSE(saved.empty());
    fill_until_done(scheduler);
    scheduler.teardown();
    const LaneStats lane = scheduler.summary().lanes.at("word_count");
    EXPECT_TRUE(messages.empty()) << messages[0];
    EXPECT_EQ(lane.isolation, "process");
    EXPECT_TRUE(lane.finished);
    EXPECT_EQ(lane.units, static_cast<double>(std::filesystem::file_size(input)));  // calibration included
    EXPECT_EQ(lane.report["words"], 9);
    EXPECT_GT(lane.memory_high_water_bytes, 0u);
    EXPECT_TRUE(std::filesystem::exists(dir + "/run/word_count/rank0/word_count.json"));
    EXPECT_TRUE(std::filesystem::exists(dir + "/run/word_count/rank0/worker.log"));
  }
  {  // restart from the state saved after calibration: the rest of the file, same totals
    GapScheduler scheduler(*backend, make_lane_specs(registry, {"word_count"}, sections, "lanes.ini", isolation),
                           options);
    scheduler.load_lanes({{"word_count", saved}});
    scheduler.calibrate();
    fill_until_done(scheduler);
    scheduler.teardown();
    EXPECT_EQ(scheduler.summary().lanes.at("word_count").report["words"], 9);
  }
  std::filesystem::remove_all(dir);
}

TEST(CommandLaneInAWorker, AProcessThatLeftItsSessionIsStoppedBetweenStepsAndKilledAtTeardown) {
  // The command writes into its output directory (the only place a sandboxed lane may write).
  LaneEnv env("command", {{"command", "setsid sh -c 'echo $$ > escape.pid; while :; do :; done' & "
                                      "while :; do sleep 0.01; done"},
                          {"slice_ms", "20"}});
  const std::string pidfile = env.dir + "/escape.pid";
  LaneWorkerLaunch launch = worker("", /*allow_children=*/true);
  ProcessLane lane("command", "cpu_ms", launch);
  lane.set_limits({5, 30, 0});
  LaneOptions options("command", {{"command", env.options.values().at("command")}, {"slice_ms", "20"},
                                  {"workdir", env.dir}}, "test.ini");
  LaneContext ctx{*env.device, *env.stream, env.arena, options, env.dir, 0, 1};
  lane.setup(ctx);
  for (int i = 0; i < 100 && pids_in(pidfile).empty(); ++i) lane.step(ctx);
  ASSERT_EQ(pids_in(pidfile).size(), 1u);
  const pid_t escape = outer_pid(lane.worker_pid(), pids_in(pidfile)[0]);
  for (int i = 0; i < 3; ++i) lane.step(ctx);
  // Between steps it does not run: stopped (T), like the command itself, or frozen with the whole
  // worker (lane_cgroup.h), which the kernel shows as D in cgroup v1.
  char state = 0;
  for (int i = 0; i < 100 && (state = state_of(escape)) != 'T' && !frozen(escape); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_TRUE(state == 'T' || frozen(escape)) << "state " << state;
  lane.teardown(ctx);
  EXPECT_FALSE(running(escape));
}

TEST(CommandLaneInAWorker, AFloodOfOutputIsCappedAtTheOutputQuota) {
  LaneEnv env("command", {{"command", "yes"}, {"slice_ms", "20"}});
  constexpr std::uint64_t kQuota = 1 << 20;
  ProcessLane lane("command", "cpu_ms", worker("", true));
  lane.set_limits({5, 30, kQuota});
  lane.setup(env.ctx);
  std::string error;
  const auto t0 = std::chrono::steady_clock::now();
  while (error.empty() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(4)) {
    try {
      lane.step(env.ctx);
    } catch (const LaneError& e) {
      error = e.what();
    }
  }
  EXPECT_LE(std::filesystem::file_size(env.dir + "/stdout.txt"), kQuota);  // the kernel's cap (RLIMIT_FSIZE)
  EXPECT_NE(error.find("[lanes] output_mb"), std::string::npos) << error;  // and then the lane is stopped
  lane.teardown(env.ctx);
}

}  // namespace
}  // namespace pipelane
