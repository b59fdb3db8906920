#include <gtest/gtest.h>
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <chrono>
#include <filesystem>
#include <thread>

#include "lanes/builtin/builtin_lanes.h"
#include "lanes/builtin/command_lane.h"
#include "tests/lanes/builtin_io_test_env.h"

namespace pipelane {
namespace {

using testing_io::LaneEnv;

std::uintmax_t size_of(const std::string& path) {
  std::error_code ec;
  const auto n = std::filesystem::file_size(path, ec);
  return ec ? 0 : n;
}

// Processes of the group that are not zombies (an orphan may wait for a reaper as a zombie).
int live_in_group(pid_t pgid) {
  int live = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name[0] < '0' || name[0] > '9') continue;
    const std::string stat = testing_io::read_file(e.path().string() + "/stat");
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0, pgrp = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %d %d", &state, &ppid, &pgrp) == 3 && pgrp == pgid &&
        state != 'Z' && state != 'X')
      ++live;
  }
  return live;
}

void pause_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

TEST(CommandLane, AdvancesOnlyWhileStepped) {
  LaneEnv holder("command_files", {});
  const std::string counter = holder.dir + "/counter.txt";
  LaneEnv env("command", {{"command", "while :; do echo x >> '" + counter + "'; done"}, {"slice_ms", "5"}});
  auto lane = builtin_lane_factories().at("command")();
  lane->setup(env.ctx);
  EXPECT_EQ(lane->work_unit(), "cpu_ms");
  pause_ms(40);
  EXPECT_EQ(size_of(counter), 0u) << "ran before its first step";
  double cpu = 0;
  for (int i = 0; i < 10; ++i) cpu += lane->step(env.ctx);
  const auto after_steps = size_of(counter);
  EXPECT_GT(after_steps, 0u);
  pause_ms(60);  // stopped between steps: not one more line
  EXPECT_EQ(size_of(counter), after_steps);
  for (int i = 0; i < 10; ++i) {
    cpu += lane->step(env.ctx);
    pause_ms(3);
  }
  EXPECT_GT(size_of(counter), after_steps);
  const auto grown = size_of(counter);
  pause_ms(40);
  EXPECT_EQ(size_of(counter), grown);
  EXPECT_FALSE(lane->finished());
  const auto rep = lane->report();
  EXPECT_EQ(rep["state"], "stopped");
  EXPECT_EQ(rep["steps"], 20);
  EXPECT_GT(rep["cpu_ms_in_gaps"].get<double>(), 0.0);  // a busy loop over 20 x 5 ms slices
  EXPECT_DOUBLE_EQ(rep["cpu_ms_in_gaps"].get<double>(), cpu);
  EXPECT_DOUBLE_EQ(rep["cpu_ms_outside_gaps"].get<double>(), 0.0);
  EXPECT_GE(rep["wall_ms_in_gaps"].get<double>(), 20 * 5.0);
  lane->teardown(env.ctx);
}

TEST(CommandLane, FinishesWithTheExitCode) {
  LaneEnv env("command", {{"command", "echo hello from the lane; echo oops >&2; exit 3"}});
  auto lane = make_command_lane();
  lane->setup(env.ctx);
  int steps = 0;
  while (!lane->finished() && steps < 400) {
    lane->step(env.ctx);
    ++steps;
  }
  ASSERT_TRUE(lane->finished());
  const auto rep = lane->report();
  EXPECT_EQ(rep["exit_code"], 3);
  EXPECT_EQ(rep["state"], "exited");
  EXPECT_EQ(testing_io::read_file(env.dir + "/stdout.txt"), "hello from the lane\n");
  EXPECT_EQ(testing_io::read_file(env.dir + "/stderr.txt"), "oops\n");
  const pid_t pid = rep["pid"].get<int>();
  EXPECT_EQ(::kill(pid, 0), -1);  // reaped
  EXPECT_EQ(errno, ESRCH);
  EXPECT_EQ(lane->step(env.ctx), 0.0);

  // A finished command is not rerun after load().
  LaneEnv again("command", {{"command", "exit 0"}});
  auto resumed = make_command_lane();
  resumed->setup(again.ctx);
  resumed->load(lane->save());
  EXPECT_TRUE(resumed->finished());
  EXPECT_EQ(resumed->report()["exit_code"], 3);
}

TEST(CommandLane, TeardownLeavesNoProcessBehind) {
  // The shell and its child `sleep` share the lane's process group.
  LaneEnv env("command", {{"command", "sleep 100; echo never"}, {"slice_ms", "2"}});
  auto lane = make_command_lane();
  lane->setup(env.ctx);
  for (int i = 0; i < 5; ++i) lane->step(env.ctx);
  const pid_t pid = lane->report()["pid"].get<int>();
  ASSERT_GT(pid, 0);
  EXPECT_EQ(::kill(pid, 0), 0);
  lane->teardown(env.ctx);
  EXPECT_TRUE(lane->finished());
  EXPECT_EQ(lane->report()["state"], "killed at teardown");
  errno = 0;
  EXPECT_EQ(::kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
  for (int i = 0; i < 100 && live_in_group(pid) > 0; ++i) pause_ms(5);  // `sleep` got SIGKILL too
  EXPECT_EQ(live_in_group(pid), 0);
  EXPECT_EQ(testing_io::read_file(env.dir + "/stdout.txt"), "");
}

TEST(CommandLane, OptionsAreValidated) {
  LaneEnv none("command", {});
  EXPECT_THROW(make_command_lane()->setup(none.ctx), LaneError);
  LaneEnv unknown("command", {{"command", "true"}, {"slice", "5"}});
  EXPECT_THROW(make_command_lane()->setup(unknown.ctx), LaneError);
  LaneEnv zero("command", {{"command", "true"}, {"slice_ms", "0"}});
  EXPECT_THROW(make_command_lane()->setup(zero.ctx), LaneError);
  LaneEnv bad_dir("command", {{"command", "true"}, {"workdir", "/nonexistent/dir"}});
  EXPECT_THROW(make_command_lane()->setup(bad_dir.ctx), LaneError);
}

}  // namespace
}  // namespace pipelane
