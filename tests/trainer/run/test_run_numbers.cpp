// The numbers a run reports about itself: the straggler and its suggested split
// (trainer/run/straggler.h), the ETA's format past a day, [run] trace_steps, and the two MFU peaks
// (trainer/run/machine_peak.h).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "tests/datasets/test_files.h"
#include "trainer/run/machine_peak.h"
#include "trainer/run/progress_line.h"
#include "trainer/run/straggler.h"
#include "trainer/config/train_options.h"

namespace pipelane {
namespace {

TEST(Straggler, NamesTheBusiestStageAndSuggestsASplit) {
  // Four stages of 3 layers; the last also holds the head (6 s more than the 10 s of three layers).
  const std::vector<double> busy = {10, 10, 10, 16};
  const std::vector<int> layers = {3, 3, 3, 3};
  const auto r = find_straggler(busy, layers, 0.40, 0.20);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->stage, 3);
  EXPECT_NEAR(r->excess, 0.6, 1e-12);
  ASSERT_EQ(r->suggested.size(), 4u);
  EXPECT_EQ(std::accumulate(r->suggested.begin(), r->suggested.end(), 0), 12);
  EXPECT_LT(r->suggested[3], 3);  // fewer layers beside the head
  // Under the model (10/3 s per layer, the head 6 s) the slowest stage drops from 16 s to 13.3 s.
  const double c = 10.0 / 3;
  double slowest = 0;
  for (int p = 0; p < 4; ++p) slowest = std::max(slowest, r->suggested[p] * c + (p == 3 ? 6 : 0));
  EXPECT_NEAR(slowest, 4 * c, 1e-9);
  EXPECT_NE(r->message.find("stage 3 is the straggler"), std::string::npos) << r->message;
  EXPECT_NE(r->message.find("layers_per_stage = "), std::string::npos) << r->message;
}

TEST(Straggler, SilentWithinFivePointsAndNamesNoneWhenStagesAreEven) {
  EXPECT_FALSE(find_straggler({10, 16}, {2, 2}, 0.25, 0.21));
  EXPECT_FALSE(find_straggler({10}, {4}, 0.9, 0.0));
  const auto even = find_straggler({10, 10.2}, {2, 2}, 0.30, 0.10);
  ASSERT_TRUE(even);
  EXPECT_EQ(even->stage, -1);
  EXPECT_TRUE(even->suggested.empty());
  EXPECT_NE(even->message.find("no stage is a straggler"), std::string::npos) << even->message;
  // Interleaved schedules (no per-stage layer counts): named, no split suggested.
  const auto interleaved = find_straggler({10, 14}, {}, 0.30, 0.10);
  ASSERT_TRUE(interleaved);
  EXPECT_EQ(interleaved->stage, 1);
  EXPECT_TRUE(interleaved->suggested.empty());
}

TEST(ProgressLine, DurationsPastADayShowDays) {
  EXPECT_EQ(format_duration(65), "1:05");
  EXPECT_EQ(format_duration(3 * 3600 + 62), "3:01:02");
  EXPECT_EQ(format_duration(1787 * 3600.0), "74d 11:00:00");
  EXPECT_EQ(format_duration(-1), "?");
}

// mpirun stops reading its ranks' output once it is told to terminate; a rank that blocked on a
// full pipe could never finish its step and save. The step line is skipped instead, and counted.
TEST(ProgressLine, AConsoleThatStopsReadingNeverBlocksAStep) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  std::FILE* out = fdopen(fds[1], "w");
  ASSERT_NE(out, nullptr);
  // Fill the pipe: a non-blocking descriptor of our own on the same pipe, so `out` stays blocking.
  const int filler = fcntl(fds[1], F_DUPFD_CLOEXEC, 0);
  std::string page(4096, 'x');
  ASSERT_EQ(fcntl(filler, F_SETFL, fcntl(filler, F_GETFL) | O_NONBLOCK), 0);
  while (write(filler, page.data(), page.size()) > 0) {
  }
  ProgressLine progress(out, 10, 1, /*allow_live=*/false);
  for (int step = 0; step < 3; ++step) progress.update(step, 1.0, 1e-3, 100, 5);  // would block
  // Drain, then the next line arrives with the count of those skipped.
  ASSERT_EQ(fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK), 0);
  std::string buf(65536, 0);
  while (read(fds[0], buf.data(), buf.size()) > 0) {
  }
  progress.update(3, 0.5, 1e-3, 100, 5);
  const ssize_t n = read(fds[0], buf.data(), buf.size());
  ASSERT_GT(n, 0);
  const std::string text = buf.substr(0, static_cast<std::size_t>(n));
  EXPECT_EQ(text, "(3 step lines skipped: the console was not reading)\n"
                  "step  4/10 | loss 0.5000 | lr 1.00e-03 | 100 tok/s | ETA 0:05\n");
  std::fclose(out);
  close(filler);
  close(fds[0]);
}

TrainOptions parse(std::vector<std::string> args) {
  args.insert(args.begin(), "train");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return parse_train_options(static_cast<int>(argv.size()), argv.data());
}

TEST(TraceSteps, RangesAndTheirErrors) {
  EXPECT_EQ(parse({}).run.traced_steps().count, 20);
  EXPECT_EQ(parse({}).run.traced_steps().first, 0);
  const auto r = parse({"--run.trace_steps=100-119"}).run.traced_steps();
  EXPECT_EQ(r.first, 100);
  EXPECT_EQ(r.last, 119);
  EXPECT_EQ(parse({"--run.trace_steps=7"}).run.traced_steps().last, 7);
  EXPECT_EQ(parse({"--run.trace_steps=none"}).run.traced_steps().count, 0);
  for (const char* bad : {"--run.trace_steps=9-5", "--run.trace_steps=0-4", "--run.trace_steps=a-b"}) {
    try {
      parse({bad});
      FAIL() << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("[run] trace_steps"), std::string::npos) << e.what();
    }
  }
}

TEST(MachinePeak, HardwarePeakScalesWithCoresAndSaysHow) {
  const CpuPeak one = cpu_hardware_peak(1), two = cpu_hardware_peak(2);
  if (one.gflops == 0) GTEST_SKIP() << "no clock known on this machine: " << one.how;
  EXPECT_DOUBLE_EQ(two.gflops, 2 * one.gflops);
  EXPECT_NE(one.how.find("FLOP/cycle"), std::string::npos) << one.how;
  // Repeatable: the same number every time (no timing involved).
  EXPECT_EQ(cpu_hardware_peak(1).gflops, one.gflops);
}

// One peak per run: the hardware's while nothing measured beats it; a measured sgemm above it means
// the hardware figure is wrong, and MFU is against the sgemm with the reason in the source.
TEST(MachinePeak, AHardwarePeakBelowTheMeasuredSgemmIsFlaggedAndReplaced) {
  const CpuPeak hw{83, "1 cores x 2.60 GHz (cpu MHz) x 32 FLOP/cycle (AVX2 + FMA)"};
  const MfuPeakChoice plain = choose_mfu_peak(0, hw, 60.0);
  EXPECT_EQ(plain.gflops, 83);
  EXPECT_FALSE(plain.hardware_contradicted);
  EXPECT_EQ(plain.source, "the hardware peak: " + hw.how);
  EXPECT_EQ(choose_mfu_peak(0, hw, std::nullopt).gflops, 83);
  const MfuPeakChoice wrong = choose_mfu_peak(0, hw, 97.0);
  EXPECT_EQ(wrong.gflops, 97);
  EXPECT_TRUE(wrong.hardware_contradicted);
  EXPECT_NE(wrong.source.find("the hardware peak (83 GFLOP/s: " + hw.how + ") is below it"), std::string::npos)
      << wrong.source;
  EXPECT_NE(wrong.source.find("clock or vector width is wrong"), std::string::npos) << wrong.source;
  // Given by the user: theirs, whatever was measured.
  const MfuPeakChoice given = choose_mfu_peak(50, hw, 97.0);
  EXPECT_EQ(given.gflops, 50);
  EXPECT_EQ(given.source, "[train] peak_gflops");
  // An unknown clock (0 GFLOP/s) is not a contradiction to report: MFU stays 0 against it.
  EXPECT_FALSE(choose_mfu_peak(0, CpuPeak{0, "clock unknown"}, 97.0).hardware_contradicted);
}

TEST(MachinePeak, SgemmPeakComesFromTheCacheAndADamagedCacheIsIgnored) {
  test_support::TempDir tmp;
  const char* old = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old ? old : "";
  setenv("XDG_CACHE_HOME", tmp.path().c_str(), 1);
  EXPECT_FALSE(sgemm_peak(3, 1, nullptr));  // nothing cached, not allowed to measure
  std::filesystem::create_directories(tmp.path() / "pipelane");
  std::ofstream(sgemm_cache_path()) << nlohmann::json{{sgemm_cache_key(3, 1), {{"gflops", 123.5}, {"measured", "then"}}}};
  const auto cached = sgemm_peak(3, 1, nullptr);
  ASSERT_TRUE(cached);
  EXPECT_EQ(cached->gflops, 123.5);
  EXPECT_NE(cached->how.find("cached"), std::string::npos);
  EXPECT_FALSE(sgemm_peak(2, 1, nullptr));  // another thread count is another entry
  forget_sgemm_peak(3, 1);                // training outran it: the next run measures again
  EXPECT_FALSE(sgemm_peak(3, 1, nullptr));
  std::ofstream(sgemm_cache_path()) << "{garbage";
  EXPECT_FALSE(sgemm_peak(3, 1, nullptr));
  if (old) setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  else unsetenv("XDG_CACHE_HOME");
}

}  // namespace
}  // namespace pipelane
