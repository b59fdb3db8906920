// Lane core: registry and plugin loader, the plugin adapter, the gap scheduler (predict, fit,
// account, quarantine, deterministic placement, save/load), LaneOptions errors.
//
// The scheduler tests run on an injected clock: a fake lane's step advances it by a chosen cost and
// each arrived() poll advances it by 1 us, so nothing here depends on how fast or how busy the
// machine is. (Plain lanes run in a ThreadLane, on a thread of their own; its deadlines are real
// time, far above these fake steps, except where a test sleeps on purpose.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "lanes/control_gaps.h"
#include "lanes/gap_scheduler.h"
#include "lanes/isolation/guarded_lane.h"
#include "lanes/lane_registry.h"
#include "lanes/pipelane_lane.h"
#include "runtime/cpu/cpu_backend.h"
#include "lanes/plugin_lane.h"

namespace pipelane {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------
// Fakes

class FakeStream : public Stream {
 public:
  StreamPriority priority() const override { return StreamPriority::Low; }
  void synchronize() override {}
};

class FakeEvent : public Event {
 public:
  void record(Stream&) override {}
  bool query() const override { return true; }
  void synchronize() override {}
  void wait_on(Stream&) override {}
  double elapsed_ms_since(const Event&) const override { return 0; }
};


struct FakeClock {
  double t = 0;
};

// What a fake lane did, visible to the test after the scheduler owns the lane.
struct FakeLog {
  int setups = 0;
  int world_size = 0, instance_index = -1, instance_count = 0;  // what setup() was given
  int steps = 0;
  int teardowns = 0;
};

class FakeLane : public Lane {
 public:
  FakeLane(std::string name, FakeClock& clock, FakeLog& log, double cost)
      : name_(std::move(name)), clock_(clock), log_(log), cost_(cost) {}
  std::string name() const override { return name_; }
  std::string work_unit() const override { return "ticks"; }
  void setup(LaneContext& ctx) override {
    ++log_.setups;
    log_.world_size = ctx.world_size;
    log_.instance_index = ctx.instance_index;
    log_.instance_count = ctx.instance_count;
    ctx.options.reject_unknown();
    arena_ = &ctx.arena;
  }
  double step(LaneContext&) override {
    const int k = log_.steps++;
    if (sleep_at == k) {  // then only the lane's own members: it may wake after the test ended
      std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
      return ++done_, 2;
    }
    double cost = cost_;
    if (cost_of_step) cost = cost_of_step(k);
    clock_.t += cost;
    if (throw_at == k) throw LaneError("broken input at step " + std::to_string(k));
    if (std_throw_at == k) throw std::runtime_error("vector too long");
    if (alloc_per_step) arena_->allocate(alloc_per_step, "fake buffer");
    ++done_;
    return 2;  // two ticks per step
  }
  bool finished() const override { return limit >= 0 && done_ >= limit; }
  std::string save() const override { return std::to_string(done_); }
  void load(const std::string& state) override { done_ = std::stoi(state); }
  nlohmann::json report() const override { return {{"done", done_}}; }
  void teardown(LaneContext&) override { ++log_.teardowns; }

  std::function<double(int)> cost_of_step;
  int throw_at = -1;
  int std_throw_at = -1;
  std::size_t alloc_per_step = 0;
  int limit = -1;
  int sleep_at = -1;  // this step sleeps sleep_ms of real time
  int sleep_ms = 0;

 private:
  std::string name_;
  FakeClock& clock_;
  FakeLog& log_;
  double cost_;
  Arena* arena_ = nullptr;
  int done_ = 0;
};

struct Harness {
  std::unique_ptr<Backend> backend_owner = make_cpu_backend(1);  // lanes here never compute
  Backend& device = *backend_owner;
  FakeClock clock;
  std::map<std::string, FakeLog> logs;
  std::vector<std::string> messages;
  std::unique_ptr<GapScheduler> scheduler;
  double poll_cost = 1e-6;

  // Lanes are configured by `configure` before the scheduler takes them.
  void start(std::vector<std::pair<std::string, double>> lanes, GapSchedulerOptions options,
             const std::function<void(FakeLane&)>& configure = {}) {
    std::vector<LaneSpec> specs;
    for (const auto& [name, cost] : lanes) {
      auto lane = std::make_unique<FakeLane>(name, clock, logs[name], cost);
      if (configure) configure(*lane);
      specs.push_back({std::move(lane), LaneOptions(name, {}, "test.ini")});
    }
    options.calibration_steps = 3;
    scheduler = std::make_unique<GapScheduler>(
        device, std::move(specs), options, std::chrono::steady_clock::now(),
        [this](const std::string& line) { messages.push_back(line); }, [this] { return clock.t; });
  }
  // One gap whose transfer arrives `length` seconds after fill() is called.
  void gap(int iteration, int gap_id, double length, WaitKind kind = WaitKind::P2PWait) {
    const double arrival = clock.t + length;
    scheduler->fill(iteration, gap_id, kind, [this, arrival] {
      clock.t += poll_cost;
      return clock.t >= arrival;
    });
  }
  // Steps of iteration `iteration` in gap `gap_id`, as lane names in order.
  std::vector<std::string> steps_in(int iteration, int gap_id) const {
    std::vector<std::string> names;
    for (const LaneStepRecord& step : scheduler->step_records())
      if (step.iteration == iteration && step.gap_id == gap_id) names.push_back(step.lane);
    return names;
  }
};

// The message of the LaneError `f` throws; "" when it throws none.
std::string lane_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const LaneError& error) {
    return error.what();
  }
  return "";
}

GapSchedulerOptions options_with(double margin = 0.95, int profile = 2, bool deterministic = false) {
  GapSchedulerOptions options;
  options.margin = margin;
  options.profile_iterations = profile;
  options.deterministic = deterministic;
  options.lane_memory_bytes = 1 << 16;
  options.stage_memory_bytes = 1 << 20;
  // The fake steps' times are on the fake clock, their own timing (LaneStepCost) real: judge by
  // the fake clock (PreemptedStepsAreForgivenRunawayOnesAreNot tests the lanes' timing).
  options.lane_timing = false;
  return options;
}

// ---------------------------------------------------------------------------------------
// Fit

TEST(GapSchedulerTest, CalibrateTimesStepsAndReportsThem) {
  Harness h;
  h.start({{"a", 0.001}, {"b", 0.004}}, options_with());
  const std::map<std::string, double> costs = h.scheduler->calibrate();
  EXPECT_NEAR(costs.at("a"), 0.001, 1e-12);
  EXPECT_NEAR(costs.at("b"), 0.004, 1e-12);
  EXPECT_EQ(h.logs["a"].setups, 1);
  EXPECT_EQ(h.logs["a"].steps, 3);
  const StageLaneSummary summary = h.scheduler->summary();
  EXPECT_NEAR(summary.lanes.at("b").calibrated_step_s, 0.004, 1e-12);
  const LaneStats& a = summary.lanes.at("a");
  EXPECT_EQ(a.calibration_steps, 3);
  // Calibration work is the lane's work (it counts in units) but not bubble work.
  EXPECT_EQ(a.steps, 3);
  EXPECT_EQ(a.units, 6);  // 3 steps x 2 ticks
  EXPECT_EQ(a.calibration_units, 6);
  EXPECT_NEAR(a.lane_s, 0.003, 1e-12);
  EXPECT_EQ(a.harvested_s, 0);
}

TEST(GapSchedulerTest, LanesLearnWhereTheirInstanceSitsInTheJob) {
  Harness h;
  GapSchedulerOptions options = options_with();
  options.world_size = 8;
  options.instance_index = 5;
  options.instance_count = 6;
  h.start({{"a", 0.001}}, options);
  h.scheduler->calibrate();
  EXPECT_EQ(h.logs["a"].world_size, 8);
  EXPECT_EQ(h.logs["a"].instance_index, 5);
  EXPECT_EQ(h.logs["a"].instance_count, 6);
}

TEST(GapSchedulerTest, ALaneLongerThanEveryGapIsReportedOnceAfterProfiling) {
  Harness h;
  h.start({{"small", 0.001}, {"huge", 0.050}}, options_with(0.9, 1));
  h.scheduler->calibrate();
  h.gap(0, 5, 0.010);
  h.gap(0, 6, 0.030);
  h.scheduler->end_iteration(0);
  ASSERT_EQ(h.messages.size(), 1u);
  EXPECT_EQ(h.messages[0].rfind("lanes: stage 0 rank 0: lane huge takes 50 ms a step, more than the largest gap (30 ms", 0),
            0u)
      << h.messages[0];  // one prefix, then the message
  h.gap(1, 6, 0.030);
  h.scheduler->end_iteration(1);
  EXPECT_EQ(h.messages.size(), 1u);  // once
  // The small lane fills the gap (0.9 x 30 ms of 1 ms steps, less the polls' time); huge never runs.
  const std::vector<std::string> ran = h.steps_in(1, 6);
  EXPECT_GE(ran.size(), 26u);
  EXPECT_EQ(std::count(ran.begin(), ran.end(), "huge"), 0);
}

TEST(GapSchedulerTest, ProfilingIterationsOnlyMeasure) {
  Harness h;
  h.start({{"a", 0.001}}, options_with(0.95, 2));
  h.scheduler->calibrate();
  for (int it = 0; it < 2; ++it) {
    h.gap(it, 5, 0.010);
    h.scheduler->end_iteration(it);
  }
  EXPECT_EQ(h.logs["a"].steps, 3);  // calibration only
  EXPECT_NEAR(h.scheduler->predicted_gap_s(5), 0.010, 2e-6);
  ASSERT_EQ(h.scheduler->gap_records().size(), 2u);
  EXPECT_TRUE(h.scheduler->gap_records()[0].arrived_exact);

  h.gap(2, 5, 0.010);
  // budget 0.95 * 10 ms = 9.5 ms of 1 ms steps: 9 fit, the 10th would pass the margin.
  EXPECT_EQ(h.steps_in(2, 5).size(), 9u);
  const GapRecord& gap = h.scheduler->gap_records().back();
  EXPECT_EQ(gap.lane_steps, 9);
  EXPECT_TRUE(gap.arrived_exact);
  EXPECT_NEAR(gap.arrived_s - gap.start_s, 0.010, 2e-6);
  const StageLaneSummary summary = h.scheduler->summary();
  EXPECT_NEAR(summary.overrun_s, 0, 1e-12);
  EXPECT_NEAR(summary.harvested_s, 0.009, 1e-9);
  EXPECT_NEAR(summary.bubble_s, 0.030, 1e-5);
  // Past the two profiled gaps only the third counts: 9 of its 10 ms.
  EXPECT_TRUE(h.scheduler->gap_records()[0].profiling);
  EXPECT_FALSE(gap.profiling);
  EXPECT_NEAR(gap.harvested_s, 0.009, 1e-9);
  EXPECT_NEAR(summary.bubble_after_profiling_s, 0.010, 1e-5);
  EXPECT_NEAR(summary.harvested_after_profiling_s, 0.009, 1e-9);
  // 3 calibration + 9 gap steps x 2 ticks, in 3 + 9 ms.
  EXPECT_EQ(summary.lanes.at("a").units, 24);
  EXPECT_NEAR(summary.lanes.at("a").units_per_s(), 2000, 1e-6);
}

TEST(GapSchedulerTest, UnmeasuredGapGetsNoWorkAndUncalibratedLanesStayIdle) {
  Harness h;
  h.start({{"a", 0.001}}, options_with(0.95, 1));
  h.gap(0, 1, 0.010);  // no calibrate() yet: measure only, warn once
  h.scheduler->end_iteration(0);
  h.gap(1, 1, 0.010);
  EXPECT_EQ(h.logs["a"].steps, 0);
  ASSERT_EQ(h.messages.size(), 1u);
  EXPECT_NE(h.messages[0].find("calibrate() was not called"), std::string::npos);
  h.scheduler->calibrate();
  h.gap(1, 2, 0.010);  // gap id 2 was never measured: no prediction, no work
  EXPECT_TRUE(h.steps_in(1, 2).empty());
  h.gap(1, 1, 0.010);
  EXPECT_EQ(h.steps_in(1, 1).size(), 9u);
}

TEST(GapSchedulerTest, StopsAsSoonAsTheTransferArrives) {
  Harness h;
  h.start({{"a", 0.001}}, options_with(0.95, 1));
  h.scheduler->calibrate();
  h.gap(0, 3, 0.010);
  h.scheduler->end_iteration(0);
  // Predicted 10 ms, but this time the transfer lands 2.5 ms in: the third step is running then.
  h.gap(1, 3, 0.0025);
  EXPECT_EQ(h.steps_in(1, 3).size(), 3u);
  const GapRecord& gap = h.scheduler->gap_records().back();
  EXPECT_FALSE(gap.arrived_exact);
  const LaneStepRecord& last = h.scheduler->step_records().back();
  EXPECT_DOUBLE_EQ(gap.arrived_s, 0.5 * (last.start_s + last.end_s));  // documented midpoint
  EXPECT_NEAR(gap.end_s, last.end_s, 2e-6);  // no further step after the arrival was seen
  const LaneStats lane = h.scheduler->summary().lanes.at("a");
  EXPECT_NEAR(lane.overrun_s, 0.0005, 1e-9);  // half of the step that straddled it
  EXPECT_NEAR(lane.harvested_s, 0.0025, 1e-8);
}

TEST(GapSchedulerTest, ArrivalBeforeAnyStepRunsNothing) {
  Harness h;
  h.start({{"a", 0.001}}, options_with(0.95, 1));
  h.scheduler->calibrate();
  h.gap(0, 0, 0.010);
  h.scheduler->end_iteration(0);
  h.gap(1, 0, 0.0);  // already there at the first poll
  EXPECT_TRUE(h.steps_in(1, 0).empty());
}

TEST(GapSchedulerTest, RoundRobinAmongLanesThatFit) {
  Harness h;
  h.start({{"a", 0.001}, {"b", 0.001}, {"big", 0.050}}, options_with(0.95, 1));
  h.scheduler->calibrate();
  h.gap(0, 0, 0.005);
  h.scheduler->end_iteration(0);
  h.gap(1, 0, 0.005);
  // 4.75 ms budget: four 1 ms steps alternate between a and b; big never fits.
  EXPECT_EQ(h.steps_in(1, 0), (std::vector<std::string>{"a", "b", "a", "b"}));
  h.gap(1, 0, 0.005);  // the cursor carries over to the next gap
  EXPECT_EQ(h.steps_in(1, 0).size(), 8u);
  EXPECT_EQ(h.steps_in(1, 0)[4], "a");
  EXPECT_EQ(h.logs["big"].steps, 3);  // calibration only
}

TEST(GapSchedulerTest, StepCostIsRefinedByActualSteps) {
  Harness h;
  h.start({{"a", 0.001}}, options_with(0.95, 1), [](FakeLane& lane) {
    lane.cost_of_step = [](int k) { return k < 3 ? 0.001 : 0.002; };  // slower after calibration
  });
  h.scheduler->calibrate();
  h.gap(0, 0, 0.020);
  h.scheduler->end_iteration(0);
  for (int i = 0; i < 10; ++i) h.gap(1, 0, 0.020);
  EXPECT_NEAR(h.scheduler->predicted_step_s("a"), 0.002, 1e-5);
  EXPECT_NEAR(h.scheduler->summary().lanes.at("a").calibrated_step_s, 0.001, 1e-12);
}

TEST(GapSchedulerTest, FinishedLanesAreNotScheduled) {
  Harness h;
  h.start({{"a", 0.001}}, options_with(0.95, 1), [](FakeLane& lane) { lane.limit = 5; });
  h.scheduler->calibrate();
  h.gap(0, 0, 0.010);
  h.scheduler->end_iteration(0);
  h.gap(1, 0, 0.010);
  EXPECT_EQ(h.logs["a"].steps, 5);
  EXPECT_TRUE(h.scheduler->summary().lanes.at("a").finished);
}

// ---------------------------------------------------------------------------------------
// Deterministic mode

// Runs `iterations` iterations of three gaps; after profiling, gap 2's transfer arrives early by a
// per-iteration jitter (which a polling scheduler would react to).
std::vector<std::tuple<int, int, std::string>> deterministic_run(double jitter, const LanePlan* plan_from = nullptr,
                                                                 Harness* keep = nullptr) {
  Harness local;
  Harness& h = keep ? *keep : local;
  h.start({{"a", 0.001}, {"b", 0.0015}}, options_with(0.9, 2, true));
  if (plan_from) h.scheduler->set_plan(*plan_from);
  h.scheduler->calibrate();
  for (int it = 0; it < 6; ++it) {
    const bool profiling = it < 2;
    h.gap(it, 0, 0.004);
    h.gap(it, 2, profiling ? 0.006 : 0.006 - jitter * (it % 3));
    h.gap(it, 7, plan_from ? 0.003 : 0.010);  // a rerun may even measure differently
    h.scheduler->end_iteration(it);
  }
  std::vector<std::tuple<int, int, std::string>> placed;
  for (const LaneStepRecord& step : h.scheduler->step_records())
    if (step.gap_id >= 0) placed.emplace_back(step.iteration, step.gap_id, step.lane);
  return placed;
}

TEST(GapSchedulerTest, DeterministicModePlacesIdenticalStepsOnReruns) {
  Harness first;
  const auto run1 = deterministic_run(0.0, nullptr, &first);
  const auto run2 = deterministic_run(0.002);  // transfers arrive earlier: no effect on placement
  ASSERT_FALSE(run1.empty());
  EXPECT_EQ(run1, run2);
  // Frozen: every post-profiling iteration runs the same sequence in a gap.
  const std::map<int, std::vector<std::string>> plan = first.scheduler->plan();
  ASSERT_EQ(plan.size(), 3u);
  for (int it = 2; it < 6; ++it) {
    EXPECT_EQ(first.steps_in(it, 2), plan.at(2));
    EXPECT_EQ(first.steps_in(it, 7), plan.at(7));
  }
  EXPECT_TRUE(first.steps_in(0, 7).empty());  // profiling
  // Gap 0 (3.6 ms budget) takes a, b, a; the cursor carries on to gap 2 (0.9 * 6 ms = 5.4 ms):
  // b, a, b, a = 5.0 ms, and neither lane fits after that.
  EXPECT_EQ(plan.at(0), (std::vector<std::string>{"a", "b", "a"}));
  EXPECT_EQ(plan.at(2), (std::vector<std::string>{"b", "a", "b", "a"}));
  double planned = 0;
  for (const std::string& lane : plan.at(2)) planned += lane == "a" ? 0.001 : 0.0015;
  EXPECT_LE(planned, 0.9 * 0.006 + 1e-12);
  EXPECT_GT(planned + 0.0015, 0.9 * 0.006);  // nothing more would have fit
  // The plan is in the summary, and a rerun handed it places work identically even when its own
  // profile measures other gap lengths.
  EXPECT_EQ(first.scheduler->summary().plan, plan);
  const auto run3 = deterministic_run(0.001, &plan);
  EXPECT_EQ(run1, run3);
}

TEST(GapSchedulerTest, DeterministicModeRunsThePlanInFullEvenWhenTheTransferHasArrived) {
  Harness h;
  h.start({{"a", 0.001}, {"b", 0.0015}}, options_with(0.9, 1, true));
  h.scheduler->calibrate();
  h.gap(0, 4, 0.006);
  h.scheduler->end_iteration(0);
  const LanePlan plan = h.scheduler->plan();
  ASSERT_EQ(plan.at(4), (std::vector<std::string>{"a", "b", "a", "b"}));  // 5 ms of 0.9 x 6 ms
  h.gap(1, 4, 0.0);  // the transfer is there before fill() is called: the plan runs regardless
  EXPECT_EQ(h.steps_in(1, 4), plan.at(4));
  h.gap(2, 4, 0.0012);  // arrives during the second step: the rest of the plan still runs
  EXPECT_EQ(h.steps_in(2, 4), plan.at(4));
  // All of the first gap's lane time came after the arrival: overrun, not harvest.
  const GapRecord& early = h.scheduler->gap_records()[1];
  EXPECT_EQ(early.lane_steps, 4);
  EXPECT_NEAR(early.harvested_s, 0.0, 1e-12);
}

// Lane steps per (gap id, lane) after the profile iterations.
std::map<std::pair<int, std::string>, int> steps_per_gap_and_lane(const Harness& h) {
  std::map<std::pair<int, std::string>, int> counts;
  for (const LaneStepRecord& step : h.scheduler->step_records())
    if (step.gap_id >= 0) ++counts[{step.gap_id, step.lane}];
  return counts;
}

TEST(GapSchedulerTest, APlanReplayedFromSummaryJsonGivesTheSameStepCountsPerGapAndLane) {
  Harness first;
  deterministic_run(0.0, nullptr, &first);
  // What a rerun's [lanes] plan reads: the run's summary, through JSON text.
  const std::string text = to_json(first.scheduler->summary()).dump();
  const StageLaneSummary read_back = stage_lane_summary_from_json(nlohmann::json::parse(text));
  ASSERT_EQ(read_back.plan, first.scheduler->plan());
  Harness replay;
  deterministic_run(0.002, &read_back.plan, &replay);  // other timing, other measured gaps
  const auto counts = steps_per_gap_and_lane(first);
  ASSERT_FALSE(counts.empty());
  EXPECT_EQ(steps_per_gap_and_lane(replay), counts);
  EXPECT_EQ(to_json(replay.scheduler->summary())["lanes"]["a"]["steps"],
            to_json(first.scheduler->summary())["lanes"]["a"]["steps"]);
}

// ---------------------------------------------------------------------------------------
// Control gaps and the interference estimate

// After profiling, the gaps is_control_gap names hold no lane work (in deterministic mode too,
// whatever the plan says) and every other gap its usual steps; profiling gaps are never controls.
TEST(GapSchedulerTest, ControlGapsAreLeftEmptyOnlyAfterProfiling) {
  for (const bool deterministic : {false, true}) {
    Harness h;
    GapSchedulerOptions options = options_with(0.95, 2, deterministic);
    options.stage = 1;
    options.control_every = 4;
    h.start({{"a", 0.001}}, options);
    h.scheduler->calibrate();
    int controls = 0;
    for (int it = 0; it < 40; ++it) {
      for (const int gap_id : {1, 3, 6}) {
        h.gap(it, gap_id, 0.010);
        const bool control = it >= 2 && is_control_gap(it, gap_id, 1, 4);
        controls += control;
        if (it < 2 || control)
          EXPECT_TRUE(h.steps_in(it, gap_id).empty()) << "iteration " << it << " gap " << gap_id;
        else
          EXPECT_EQ(h.steps_in(it, gap_id).size(), 9u) << "iteration " << it << " gap " << gap_id;
      }
      h.scheduler->training_after_gaps(it, {{1, 0.004}, {3, 0.004}, {6, 0.004}});
      h.scheduler->end_iteration(it);
    }
    EXPECT_GT(controls, 10);
    const InterferenceEstimate e = *h.scheduler->summary().interference;
    EXPECT_EQ(e.control_every, 4);
    EXPECT_EQ(e.control_gaps, controls) << "profiling gaps are neither controls nor samples";
    EXPECT_EQ(e.lane_gaps, 38 * 3 - controls);
  }
}

// A delay injected after the gaps a lane step ran in (what a lane's working set would cost
// training's next instruction) comes back from the scheduler's summary within its standard error;
// without one the estimate is consistent with zero. Training's compute is reported as the executor
// does. A gap left to the lanes counts whether a step ran in it or not; the delay is only where
// one ran.
TEST(GapSchedulerTest, InterferenceIsEstimatedFromTrainingsComputeAfterFilledAndControlGaps) {
  for (const double delay : {0.0004, 0.0}) {
    Harness h;
    GapSchedulerOptions options = options_with(0.95, 1);
    options.control_every = 8;
    h.start({{"a", 0.001}}, options);
    h.scheduler->calibrate();
    std::mt19937_64 random(42);
    std::normal_distribution<double> noise(0.0, 0.0003);
    long lane_gaps = 0, ran = 0;
    for (int it = 0; it < 200; ++it) {
      std::vector<TrainingAfterGap> after;
      for (const auto& [gap_id, compute] : std::map<int, double>{{2, 0.004}, {5, 0.009}}) {
        h.gap(it, gap_id, 0.006);
        const bool lane_ran = !h.steps_in(it, gap_id).empty();
        if (it >= 1 && !is_control_gap(it, gap_id, 0, 8)) {
          ++lane_gaps;
          ran += lane_ran;
        }
        after.push_back({gap_id, compute + (lane_ran ? delay : 0.0) + noise(random)});
      }
      after.push_back({9, 0.001});  // a wait that never reached fill() here: no sample
      h.scheduler->training_after_gaps(it, after);
      h.scheduler->end_iteration(it);
    }
    const InterferenceEstimate e = *h.scheduler->summary().interference;
    ASSERT_TRUE(e.estimated) << why_not_estimated(e);
    EXPECT_EQ(e.lane_gaps, lane_gaps);
    EXPECT_GT(e.control_gaps, 20);
    const double truth = delay * static_cast<double>(ran);
    EXPECT_LE(std::abs(e.extra_s - truth), 3 * e.stderr_s) << "delay " << delay << ": " << e.extra_s << " +- " << e.stderr_s;
    if (delay > 0) {
      EXPECT_GT(e.extra_s, 3 * e.stderr_s);
    }
  }
}

TEST(GapSchedulerTest, WithoutControlGapsTheSummarySaysSo) {
  Harness h;
  h.start({{"a", 0.001}}, options_with(0.95, 1));  // the scheduler's default: control_every 0
  h.scheduler->calibrate();
  for (int it = 0; it < 10; ++it) {
    h.gap(it, 2, 0.006);
    EXPECT_EQ(h.steps_in(it, 2).empty(), it == 0);
    h.scheduler->training_after_gaps(it, {{2, 0.004}});
    h.scheduler->end_iteration(it);
  }
  const InterferenceEstimate e = *h.scheduler->summary().interference;
  EXPECT_FALSE(e.estimated);
  EXPECT_EQ(e.control_gaps, 0);
  EXPECT_EQ(e.lane_gaps, 9);
  EXPECT_EQ(why_not_estimated(e), "control gaps off ([lanes] control_every = 0)");
}

TEST(GapSchedulerTest, SetPlanRefusesALaneThatDoesNotRunHere) {
  Harness h;
  h.start({{"a", 0.001}}, options_with(0.9, 1, true));
  EXPECT_EQ(lane_error([&] { h.scheduler->set_plan({{3, {"a", "zebra"}}}); }),
            "lane plan: gap 3 names lane 'zebra', which does not run on this stage");
}

// ---------------------------------------------------------------------------------------
// Quarantine

void expect_quarantined(Harness& h, const std::string& lane, const std::string& reason_part) {
  EXPECT_TRUE(h.scheduler->quarantined(lane));
  const StageLaneSummary summary = h.scheduler->summary();
  int quarantined = 0;
  for (const auto& [name, stats] : summary.lanes) quarantined += stats.quarantined;
  ASSERT_EQ(quarantined, 1);
  ASSERT_TRUE(summary.lanes.at(lane).quarantined);
  const std::string reason = summary.lanes.at(lane).quarantine_reason;
  EXPECT_NE(reason.find(reason_part), std::string::npos) << reason;
  EXPECT_EQ(h.logs[lane].teardowns, 1);
  int told = 0;
  for (const std::string& message : h.messages)
    if (message.find("'" + lane + "' quarantined") != std::string::npos) ++told;
  EXPECT_EQ(told, 1);  // printed once
}

// Profiling, then `iterations` iterations of one 10 ms gap.
void run_gaps(Harness& h, int iterations) {
  h.scheduler->calibrate();
  h.gap(0, 0, 0.010);
  h.scheduler->end_iteration(0);
  for (int it = 1; it <= iterations; ++it) {
    h.gap(it, 0, 0.010);
    h.scheduler->end_iteration(it);
  }
}

TEST(GapSchedulerTest, QuarantinesALaneWhoseStepThrowsAndTrainingCarriesOn) {
  Harness h;
  h.start({{"bad", 0.001}, {"good", 0.001}}, options_with(0.95, 1), [](FakeLane& lane) {
    if (lane.name() == "bad") lane.throw_at = 5;
  });
  run_gaps(h, 3);
  expect_quarantined(h, "bad", "broken input at step 5");
  EXPECT_EQ(h.logs["bad"].steps, 6);  // never scheduled after the throw
  EXPECT_GT(h.logs["good"].steps, 20);
  EXPECT_EQ(h.scheduler->save_lanes().count("bad"), 0u);
}

TEST(GapSchedulerTest, QuarantinesOnAnyStdException) {
  Harness h;
  h.start({{"bad", 0.001}}, options_with(0.95, 1), [](FakeLane& lane) { lane.std_throw_at = 1; });
  run_gaps(h, 2);
  expect_quarantined(h, "bad", "vector too long");
  EXPECT_EQ(h.logs["bad"].steps, 2);  // during calibration: it never reaches a gap
}

TEST(GapSchedulerTest, QuarantinesALaneThatGoesPastItsArenaQuota) {
  Harness h;
  GapSchedulerOptions options = options_with(0.95, 1);
  options.lane_memory_bytes = 16 * 1024;
  h.start({{"greedy", 0.001}, {"good", 0.001}}, options, [](FakeLane& lane) {
    if (lane.name() == "greedy") lane.alloc_per_step = 3 * 1024;
  });
  run_gaps(h, 2);
  expect_quarantined(h, "greedy", "arena quota");
  EXPECT_EQ(h.logs["greedy"].steps, 6);  // the sixth allocation (18 KiB) is over 16 KiB
  EXPECT_GT(h.logs["good"].steps, 10);
}

TEST(GapSchedulerTest, QuarantinesALaneWhoseStepsTakeTenTimesTheirPredictionTooOften) {
  Harness h;
  // Steps 0-2 calibrate; gap steps from 3 on. Three late ones among the last 16, not in a row.
  h.start({{"slow", 0.001}}, options_with(0.95, 1), [](FakeLane& lane) {
    lane.cost_of_step = [](int k) { return k == 6 || k == 9 || k == 12 ? 0.0105 : 0.001; };
  });
  run_gaps(h, 4);
  expect_quarantined(h, "slow", "3 of its last 10 steps took more than 10x the predicted 0.001 s (the last 0.0105 s)");
  EXPECT_EQ(h.logs["slow"].steps, 13);
  // The step's time after the arrival is still charged to the lane.
  EXPECT_GT(h.scheduler->summary().lanes.at("slow").overrun_s, 0.0);
}

TEST(GapSchedulerTest, AlternatingFastAndSlowStepsAreQuarantined) {
  Harness h;
  h.start({{"slow", 0.0002}}, options_with(0.95, 1), [](FakeLane& lane) {
    lane.cost_of_step = [](int k) { return k >= 5 && k % 2 ? 0.04 : 0.0002; };  // 200x every other step
  });
  run_gaps(h, 6);
  expect_quarantined(h, "slow", "3 of its last 7 steps took more than 10x");
}

TEST(GapSchedulerTest, TwoTenfoldSpikesAreNotQuarantined) {
  Harness h;
  h.start({{"slow", 0.001}}, options_with(0.95, 1), [](FakeLane& lane) {
    lane.cost_of_step = [](int k) { return k == 6 || k == 7 ? 0.0105 : 0.001; };
  });
  run_gaps(h, 3);
  EXPECT_FALSE(h.scheduler->quarantined("slow"));
  EXPECT_GT(h.logs["slow"].steps, 8);  // it kept running after the spikes
}

TEST(GapSchedulerTest, LateStepsOutsideTheWindowAreForgotten) {
  Harness h;
  GapSchedulerOptions options = options_with(0.95, 1);
  options.runaway_window = 4;
  h.start({{"slow", 0.001}}, options, [](FakeLane& lane) {
    lane.cost_of_step = [](int k) { return k % 4 == 0 && k > 3 ? 0.0105 : 0.001; };  // one late step in four
  });
  run_gaps(h, 6);
  EXPECT_FALSE(h.scheduler->quarantined("slow"));
}

TEST(GapSchedulerTest, AStepPastItsDeadlineEndsTheGapOnTimeAndQuarantinesTheLane) {
  Harness h;
  GapSchedulerOptions options = options_with(0.95, 1);
  options.step_deadline_min_s = 0.05;  // real seconds; 50 x the 1 ms prediction is the same
  h.start({{"stuck", 0.001}, {"good", 0.001}}, options, [](FakeLane& lane) {
    if (lane.name() == "stuck") {
      lane.sleep_at = 5;
      lane.sleep_ms = 3000;
    }
  });
  const auto t0 = std::chrono::steady_clock::now();
  run_gaps(h, 3);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.5);  // not 3 s
  EXPECT_TRUE(h.scheduler->quarantined("stuck"));
  EXPECT_FALSE(h.scheduler->quarantined("good"));
  const std::string reason = h.scheduler->summary().lanes.at("stuck").quarantine_reason;
  EXPECT_NE(reason.find("step did not return within its deadline of 0.05 s; an in-process lane cannot be stopped"),
            std::string::npos)
      << reason;
  EXPECT_EQ(h.logs["stuck"].teardowns, 0);  // its thread is still in the step: never torn down
  EXPECT_GT(h.logs["good"].steps, 10);
}

TEST(GapSchedulerTest, NineTimesSlowerIsNotQuarantined) {
  Harness h;
  h.start({{"slow", 0.001}}, options_with(0.95, 1), [](FakeLane& lane) {
    lane.cost_of_step = [](int k) { return k == 6 ? 0.009 : 0.001; };
  });
  run_gaps(h, 2);
  EXPECT_FALSE(h.scheduler->quarantined("slow"));
}

// A GuardedLane (run as it is, not wrapped) whose steps report how the OS treated them.
class MeasuredLane : public GuardedLane {
 public:
  using Plan = std::function<std::pair<double, LaneStepCost>(int)>;  // step -> (fake seconds, cost)
  MeasuredLane(FakeClock& clock, Plan plan) : clock_(clock), plan_(std::move(plan)) {}
  std::string name() const override { return "measured"; }
  std::string work_unit() const override { return "ticks"; }
  void setup(LaneContext&) override {}
  double step(LaneContext&) override {
    const auto [seconds, cost] = plan_(steps_++);
    clock_.t += seconds;
    cost_ = cost;
    if (cost_.wall_s == 0) cost_.wall_s = seconds;  // unless the plan says otherwise: all its own
    return 1;
  }
  bool finished() const override { return false; }
  std::string save() const override { return ""; }
  void load(const std::string&) override {}
  nlohmann::json report() const override { return nlohmann::json::object(); }
  void set_limits(const LaneLimits&) override {}
  LaneStepCost last_step_cost() const override { return cost_; }
  std::size_t memory_high_water() const override { return 0; }
  LaneIsolation isolation() const override { return LaneIsolation::Thread; }

 private:
  FakeClock& clock_;
  Plan plan_;
  int steps_ = 0;
  LaneStepCost cost_;
};

// Calibration, one profiled gap, then six 10 ms gaps; every other step from the 6th on takes 20 ms
// on the clock, with `slow_cost` reported for it.
bool measured_lane_quarantined(LaneStepCost slow_cost) {
  Harness h;
  GapSchedulerOptions options = options_with(0.95, 1);
  options.lane_timing = true;
  std::vector<LaneSpec> specs;
  specs.push_back({std::make_unique<MeasuredLane>(h.clock, [slow_cost](int k) {
                     return k >= 5 && k % 2 ? std::make_pair(0.02, slow_cost)
                                            : std::make_pair(0.001, LaneStepCost{0, 0.001, 0});
                   }),
                   LaneOptions("measured", {}, "test.ini")});
  h.scheduler = std::make_unique<GapScheduler>(h.device, std::move(specs), options, std::chrono::steady_clock::now(),
                                               [&h](const std::string& line) { h.messages.push_back(line); },
                                               [&h] { return h.clock.t; });
  run_gaps(h, 6);
  return h.scheduler->quarantined("measured");
}

TEST(GapSchedulerTest, PreemptedStepsAreForgivenRunawayOnesAreNot) {
  // 20x its prediction on the clock, but its own CPU time stayed at 1 ms and the OS took the CPU
  // away: the machine was busy, not the lane.
  EXPECT_FALSE(measured_lane_quarantined({0, 0.001, 2}));
  // The same, not preempted (it waited or slept on its own), or working 20x longer: the lane.
  EXPECT_TRUE(measured_lane_quarantined({0, 0.001, 0}));
  EXPECT_TRUE(measured_lane_quarantined({0, 0.02, 2}));
}

TEST(GapSchedulerTest, TimeWaitingForACpuIsNotTheLanes) {
  // 20 ms, of which 19 waiting on a run queue: 1 ms of its own. Without that wait: its own.
  EXPECT_FALSE(measured_lane_quarantined({0.02, 0.001, 0, 0.019}));
  EXPECT_TRUE(measured_lane_quarantined({0.02, 0.001, 5, 0.0}));
}

TEST(GapSchedulerTest, ALaneIsJudgedByItsOwnTimeNotTheWaitToHandItOver) {
  // 20 ms on the scheduler's clock, of which the lane ran 1 ms (the rest: waiting for a CPU to
  // hand the step over on a busy machine). Its own time is what counts.
  Harness h;
  GapSchedulerOptions options = options_with(0.95, 1);
  options.lane_timing = true;
  std::vector<LaneSpec> specs;
  specs.push_back({std::make_unique<MeasuredLane>(h.clock,
                                                  [](int k) {
                                                    return std::make_pair(k >= 5 && k % 2 ? 0.02 : 0.001,
                                                                          LaneStepCost{0.001, 0.001, 0, -1});
                                                  }),
                   LaneOptions("measured", {}, "test.ini")});
  h.scheduler = std::make_unique<GapScheduler>(h.device, std::move(specs), options, std::chrono::steady_clock::now(),
                                               [&h](const std::string& line) { h.messages.push_back(line); },
                                               [&h] { return h.clock.t; });
  run_gaps(h, 6);
  EXPECT_FALSE(h.scheduler->quarantined("measured"));
}

TEST(GapSchedulerTest, RecordsAreBoundedWhileTotalsCountEveryGapAndStep) {
  Harness h;
  GapSchedulerOptions options = options_with(0.95, 1);
  options.max_records = 5;
  h.start({{"a", 0.001}}, options);
  run_gaps(h, 10);  // a profiled gap, then ten gaps of nine 1 ms steps
  ASSERT_EQ(h.scheduler->step_records().size(), 5u);
  EXPECT_EQ(h.scheduler->step_records()[0].iteration, -1);  // the first ones: calibration
  EXPECT_EQ(h.scheduler->gap_records().size(), 5u);
  const StageLaneSummary summary = h.scheduler->summary();
  EXPECT_EQ(summary.gaps, 11u);
  EXPECT_NEAR(summary.bubble_s, 0.110, 1e-4);
  EXPECT_NEAR(summary.bubble_after_profiling_s, 0.100, 1e-4);
  EXPECT_EQ(summary.lanes.at("a").steps, 3 + 90);  // calibration and gaps
  EXPECT_NEAR(summary.harvested_after_profiling_s / summary.bubble_after_profiling_s, 0.9, 1e-3);
}

TEST(GapSchedulerTest, QuarantinesALaneWhoseSetupRejectsItsOptions) {
  Harness h;
  std::vector<LaneSpec> specs;
  specs.push_back({std::make_unique<FakeLane>("picky", h.clock, h.logs["picky"], 0.001),
                   LaneOptions("picky", {{"colour", "red"}}, "configs/x.ini")});
  std::vector<std::string> messages;
  GapScheduler scheduler(h.device, std::move(specs), options_with(), std::chrono::steady_clock::now(),
                         [&](const std::string& line) { messages.push_back(line); }, [&] { return h.clock.t; });
  EXPECT_TRUE(scheduler.calibrate().empty());
  EXPECT_TRUE(scheduler.quarantined("picky"));
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_NE(messages[0].find("configs/x.ini: [lane.picky] colour: unknown key for lane 'picky'"), std::string::npos)
      << messages[0];
}

TEST(GapSchedulerTest, StageMemoryCapIsEnforced) {
  Harness h;
  GapSchedulerOptions options = options_with();
  options.lane_memory_bytes = std::size_t{512} << 20;
  options.stage_memory_bytes = std::size_t{1024} << 20;
  try {
    h.start({{"a", 0.001}, {"b", 0.001}, {"c", 0.001}}, options);
    FAIL() << "expected LaneError";
  } catch (const LaneError& error) {
    EXPECT_NE(std::string(error.what()).find("3 lanes x 512 MiB = 1536 MiB exceed the stage's lane memory cap of 1024 MiB"),
              std::string::npos)
        << error.what();
  }
}

TEST(GapSchedulerTest, SaveAndLoadLanesDelegateToTheLanes) {
  Harness h;
  h.start({{"a", 0.001}, {"b", 0.001}}, options_with(0.95, 1));
  run_gaps(h, 1);
  const std::map<std::string, std::string> saved = h.scheduler->save_lanes();
  ASSERT_EQ(saved.size(), 2u);
  const int done_a = std::stoi(saved.at("a"));
  EXPECT_GT(done_a, 3);

  Harness restarted;
  restarted.start({{"a", 0.001}, {"b", 0.001}}, options_with(0.95, 1));
  std::map<std::string, std::string> with_stale = saved;
  with_stale["gone"] = "7";
  restarted.scheduler->load_lanes(with_stale);
  EXPECT_EQ(restarted.logs["a"].setups, 1);
  EXPECT_EQ(restarted.scheduler->save_lanes(), saved);
  restarted.scheduler->calibrate();  // setup is not repeated
  EXPECT_EQ(restarted.logs["a"].setups, 1);
  EXPECT_EQ(std::stoi(restarted.scheduler->save_lanes().at("a")), done_a + 3);
  ASSERT_EQ(restarted.messages.size(), 1u);
  EXPECT_NE(restarted.messages[0].find("'gone' ignored"), std::string::npos);
}

TEST(GapSchedulerTest, TeardownOnceForEveryLane) {
  Harness h;
  h.start({{"a", 0.001}}, options_with());
  h.scheduler->calibrate();
  h.scheduler->teardown();
  h.scheduler->teardown();
  h.scheduler.reset();
  EXPECT_EQ(h.logs["a"].teardowns, 1);
}

// ---------------------------------------------------------------------------------------
// Registry and plugins

std::unique_ptr<Lane> make_named(const std::string& name) {
  static FakeClock clock;
  static FakeLog log;
  return std::make_unique<FakeLane>(name, clock, log, 0.001);
}

TEST(LaneRegistryTest, CreatesByNameAndNamesKnownLanesOnUnknown) {
  LaneRegistry registry;
  registry.add("pagerank", [] { return make_named("pagerank"); });
  registry.add("imageproc", [] { return make_named("imageproc"); });
  EXPECT_EQ(registry.names(), (std::vector<std::string>{"imageproc", "pagerank"}));
  EXPECT_EQ(registry.create("pagerank")->name(), "pagerank");
  try {
    registry.create("pagernak");
    FAIL();
  } catch (const LaneError& error) {
    EXPECT_STREQ(error.what(), "unknown lane 'pagernak' (known lanes: imageproc, pagerank)");
  }
  EXPECT_THROW(registry.add("pagerank", [] { return make_named("x"); }), LaneError);
  EXPECT_THROW(LaneRegistry().create("x"), LaneError);
}

TEST(LaneRegistryTest, WithBuiltinsHasTheBuiltinFactories) {
  const LaneRegistry registry = LaneRegistry::with_builtins();
  std::vector<std::string> expected;
  for (const auto& [name, factory] : builtin_lane_factories()) expected.push_back(name);
  EXPECT_EQ(registry.names(), expected);
}

TEST(LaneRegistryTest, PluginLoadErrorsAreClear) {
  LaneRegistry registry;
  EXPECT_EQ(lane_error([&] { registry.load_plugin("/nonexistent/libnothing.so"); }),
            "/nonexistent/libnothing.so: no such lane plugin file");
  const std::string no_symbol = PIPELANE_BAD_PLUGIN_NO_SYMBOL;
  EXPECT_EQ(lane_error([&] { registry.load_plugin(no_symbol); }),
            no_symbol + ": no symbol pipelane_lane_plugin_v1 \u2014 not a pipelane lane plugin");
  const std::string abi7 = PIPELANE_BAD_PLUGIN_ABI7;
  EXPECT_EQ(lane_error([&] { registry.load_plugin(abi7); }),
            abi7 + ": built for lane ABI 7, this pipelane speaks 1 to 2");
  // A text file is not a shared library.
  const fs::path text = fs::temp_directory_path() / ("pipelane_not_a_lib_" + std::to_string(::getpid()) + ".so");
  std::ofstream(text) << "hello";
  EXPECT_NE(lane_error([&] { registry.load_plugin(text.string()); }).find("cannot load lane plugin"), std::string::npos);
  fs::remove(text);
  EXPECT_TRUE(registry.names().empty());
}

class PluginLaneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pipelane_plugin_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "out");
    // 3 lines, 9 words, with runs of spaces and a word at the very end without a newline.
    input_ = (dir_ / "input.txt").string();
    std::ofstream(input_) << "hello world\n  pipeline   bubbles are\twasted\nfill them now";
    registry_.load_plugin(PIPELANE_EXAMPLE_LANE);
  }
  void TearDown() override { fs::remove_all(dir_); }

  struct Run {
    std::unique_ptr<Lane> lane;
    LaneOptions options;
    Arena arena;
    FakeStream stream;
    std::unique_ptr<LaneContext> ctx;
    Run(std::unique_ptr<Lane> l, LaneOptions o, Backend& device, const std::string& out, std::size_t quota)
        : lane(std::move(l)), options(std::move(o)), arena("test lane", quota) {
      ctx.reset(new LaneContext{device, stream, arena, options, out, 0, 1});
    }
  };
  std::unique_ptr<Run> make(std::map<std::string, std::string> values, std::size_t quota = 1 << 16) {
    return std::make_unique<Run>(registry_.create("word_count"), LaneOptions("word_count", std::move(values), "lanes.ini"),
                                 device_, (dir_ / "out").string(), quota);
  }

  fs::path dir_;
  std::string input_;
  std::unique_ptr<Backend> backend_owner_ = make_cpu_backend(1);
  Backend& device_ = *backend_owner_;
  LaneRegistry registry_;
};

TEST_F(PluginLaneTest, CountsWordsInChunksAndWritesTotals) {
  EXPECT_EQ(registry_.names(), (std::vector<std::string>{"word_count"}));
  auto run = make({{"input", input_}, {"chunk_bytes", "7"}});  // words straddle chunks
  EXPECT_EQ(run->lane->name(), "word_count");
  EXPECT_EQ(run->lane->work_unit(), "bytes");
  run->lane->setup(*run->ctx);
  EXPECT_GE(run->arena.used(), 7u);  // the chunk came from the lane's arena
  double units = 0;
  int steps = 0;
  while (!run->lane->finished()) {
    units += run->lane->step(*run->ctx);
    ++steps;
  }
  const std::size_t size = fs::file_size(input_);
  EXPECT_EQ(units, static_cast<double>(size));
  EXPECT_EQ(steps, static_cast<int>((size + 6) / 7));
  const nlohmann::json report = run->lane->report();
  EXPECT_EQ(report["words"], 9);
  EXPECT_EQ(report["lines"], 2);
  EXPECT_EQ(report["bytes_counted"], size);
  run->lane->teardown(*run->ctx);
  EXPECT_EQ(run->lane->report()["words"], 9);  // survives teardown
  std::ifstream out(dir_ / "out" / "word_count.json");
  ASSERT_TRUE(out.good());
  const nlohmann::json totals = nlohmann::json::parse(out);
  EXPECT_EQ(totals["words"], 9);
  EXPECT_EQ(totals["lines"], 2);
}

TEST_F(PluginLaneTest, SaveAndLoadResumeMidFile) {
  auto first = make({{"input", input_}, {"chunk_bytes", "5"}});
  first->lane->setup(*first->ctx);
  for (int i = 0; i < 4; ++i) first->lane->step(*first->ctx);  // stops inside "pipeline"
  const std::string state = first->lane->save();
  auto second = make({{"input", input_}, {"chunk_bytes", "5"}});
  second->lane->setup(*second->ctx);
  second->lane->load(state);
  while (!second->lane->finished()) second->lane->step(*second->ctx);
  EXPECT_EQ(second->lane->report()["words"], 9);
  EXPECT_THROW(second->lane->load("garbage"), LaneError);
}

TEST_F(PluginLaneTest, OptionAndInputErrorsAreLaneErrors) {
  auto unknown = make({{"input", input_}, {"chunk_byte", "5"}});
  EXPECT_EQ(lane_error([&] { unknown->lane->setup(*unknown->ctx); }),
            "lanes.ini: [lane.word_count] chunk_byte: unknown key for lane 'word_count'");
  auto missing = make({});
  EXPECT_NE(lane_error([&] { missing->lane->setup(*missing->ctx); }).find("input is required"), std::string::npos);
  auto bad = make({{"input", input_}, {"chunk_bytes", "0"}});
  EXPECT_NE(lane_error([&] { bad->lane->setup(*bad->ctx); }).find("chunk_bytes = '0'"), std::string::npos);
  auto absent = make({{"input", (dir_ / "absent.txt").string()}});
  EXPECT_NE(lane_error([&] { absent->lane->setup(*absent->ctx); }).find("cannot open input"), std::string::npos);
}

TEST_F(PluginLaneTest, AllocationPastTheQuotaIsAnArenaQuotaError) {
  auto run = make({{"input", input_}, {"chunk_bytes", "100000"}}, 4096);
  EXPECT_THROW(run->lane->setup(*run->ctx), ArenaQuotaError);
}

TEST_F(PluginLaneTest, InstancesShardTheFileSoTheirCountsAddUpToTheFiles) {
  // One instance per rank that runs lanes; every split point of the 57-byte file is some
  // instance's boundary for one of these counts (inside words, inside runs of spaces, at '\n').
  const double size = static_cast<double>(fs::file_size(input_));
  for (int count = 1; count <= 24; ++count) {
    long long words = 0, lines = 0;
    double bytes = 0;
    for (int index = 0; index < count; ++index) {
      auto run = make({{"input", input_}, {"chunk_bytes", "4"}});
      run->ctx->world_size = 32;
      run->ctx->instance_index = index;
      run->ctx->instance_count = count;
      run->lane->setup(*run->ctx);
      while (!run->lane->finished()) bytes += run->lane->step(*run->ctx);
      const nlohmann::json report = run->lane->report();
      words += report["words"].get<long long>();
      lines += report["lines"].get<long long>();
      EXPECT_EQ(report["instance"], index);
      EXPECT_EQ(report["instances"], count);
      EXPECT_EQ(report["device"], "cpu");
    }
    EXPECT_EQ(words, 9) << count << " instances";
    EXPECT_EQ(lines, 2) << count << " instances";
    EXPECT_EQ(bytes, size) << count << " instances";
  }
  // shard = false: each instance counts the whole file.
  auto whole = make({{"input", input_}, {"shard", "false"}});
  whole->ctx->instance_index = 1;
  whole->ctx->instance_count = 2;
  whole->lane->setup(*whole->ctx);
  while (!whole->lane->finished()) whole->lane->step(*whole->ctx);
  EXPECT_EQ(whole->lane->report()["words"], 9);
}

TEST_F(PluginLaneTest, SavedProgressOfAnotherShardIsRefused) {
  auto first = make({{"input", input_}, {"chunk_bytes", "4"}});
  first->ctx->instance_count = 2;
  first->lane->setup(*first->ctx);
  first->lane->step(*first->ctx);
  const std::string state = first->lane->save();
  auto second = make({{"input", input_}, {"chunk_bytes", "4"}});
  second->ctx->instance_index = 1;
  second->ctx->instance_count = 2;
  second->lane->setup(*second->ctx);
  const std::size_t size = fs::file_size(input_);
  const std::string second_half = "[" + std::to_string(size / 2) + ", " + std::to_string(size) + ")";
  EXPECT_NE(lane_error([&] { second->lane->load(state); }).find("this instance bytes " + second_half), std::string::npos)
      << lane_error([&] { second->lane->load(state); });
}

TEST_F(PluginLaneTest, FinishedIsStillTrueAfterTeardown) {
  auto run = make({{"input", input_}});
  EXPECT_FALSE(run->lane->finished());  // nothing done before setup
  run->lane->setup(*run->ctx);
  while (!run->lane->finished()) run->lane->step(*run->ctx);
  run->lane->teardown(*run->ctx);
  EXPECT_TRUE(run->lane->finished());
  auto unfinished = make({{"input", input_}, {"chunk_bytes", "4"}});
  unfinished->lane->setup(*unfinished->ctx);
  unfinished->lane->step(*unfinished->ctx);
  unfinished->lane->teardown(*unfinished->ctx);
  EXPECT_FALSE(unfinished->lane->finished());
}

TEST(PluginAbiTest, AVersion1PluginStillLoadsAndGetsVersion1Arguments) {
  LaneRegistry registry;
  registry.load_plugin(PIPELANE_V1_PLUGIN);
  std::unique_ptr<Lane> lane = registry.create("v1_counter");
  EXPECT_EQ(lane->work_unit(), "steps");
  const std::unique_ptr<Backend> device = make_cpu_backend(1);
  FakeStream stream;
  Arena arena("v1 lane", 1 << 16);
  const LaneOptions options("v1_counter", {{"steps", "4"}, {"bytes", "100"}}, "lanes.ini");
  LaneContext ctx{*device, stream, arena, options, "/some/out/dir", 3, 12345};
  ctx.world_size = 8;  // a version-1 plugin never sees these
  ctx.instance_index = 2;
  ctx.instance_count = 5;
  lane->setup(ctx);
  EXPECT_GE(arena.used(), 100u);  // its allocator reached the arena
  int steps = 0;
  double units = 0;
  while (!lane->finished()) {
    units += lane->step(ctx);
    ++steps;
  }
  EXPECT_EQ(steps, 4);
  EXPECT_EQ(units, 4);
  const nlohmann::json report = lane->report();
  EXPECT_EQ(report["rank"], 3);  // every version-1 field arrived in place
  EXPECT_EQ(report["seed"], 12345);
  EXPECT_EQ(report["output_dir"], "/some/out/dir");
  EXPECT_EQ(lane->save(), "4");
  lane->teardown(ctx);
  EXPECT_TRUE(lane->finished());

  std::unique_ptr<Lane> picky = registry.create("v1_counter");
  const LaneOptions unknown("v1_counter", {{"colour", "red"}}, "lanes.ini");
  LaneContext bad{*device, stream, arena, unknown, "", 0, 1};
  EXPECT_EQ(lane_error([&] { picky->setup(bad); }), "lanes.ini: [lane.v1_counter] colour: unknown key for lane 'v1_counter'");
}

int fake_finished(const void*) { return 1; }
void* fake_create(const pipelane_lane_create_args*, char*, std::size_t) { return nullptr; }
double fake_step(void*, char*, std::size_t) { return 0; }
int fake_save(const void*, char**, std::size_t*, char*, std::size_t) { return 0; }
int fake_load(void*, const char*, std::size_t, char*, std::size_t) { return 0; }
void fake_destroy(void*) {}

pipelane_lane_plugin complete_v2() {
  pipelane_lane_plugin p{};
  p.abi_version = 2;
  p.struct_size = sizeof p;
  p.name = "fake";
  p.create = fake_create;
  p.step = fake_step;
  p.finished = fake_finished;
  p.save = fake_save;
  p.load = fake_load;
  p.destroy = fake_destroy;
  return p;
}

TEST(PluginAbiTest, DescriptionsAreReadUpToTheirStructSize) {
  const pipelane_lane_plugin v2 = complete_v2();
  const PluginDescription read = read_plugin_description(&v2, "x.so");
  EXPECT_EQ(read.abi_version, 2u);
  EXPECT_STREQ(read.fields.name, "fake");
  EXPECT_EQ(read.fields.destroy, &fake_destroy);

  // A description from a later header with fields appended: what this pipelane knows is read.
  struct Longer {
    pipelane_lane_plugin known;
    void* appended[4];
  } longer{complete_v2(), {}};
  longer.known.struct_size = sizeof longer;
  EXPECT_STREQ(read_plugin_description(&longer.known, "x.so").fields.name, "fake");

  pipelane_lane_plugin truncated = complete_v2();
  truncated.struct_size = 16;
  EXPECT_NE(lane_error([&] { read_plugin_description(&truncated, "x.so"); }).find("x.so: lane ABI 2 description of 16 bytes"),
            std::string::npos);
  pipelane_lane_plugin incomplete = complete_v2();
  incomplete.step = nullptr;
  incomplete.load = nullptr;
  EXPECT_EQ(lane_error([&] { read_plugin_description(&incomplete, "x.so"); }),
            "x.so: lane plugin description lacks: step load");
  EXPECT_EQ(lane_error([&] { read_plugin_description(nullptr, "x.so"); }),
            "x.so: pipelane_lane_plugin_v1() returned NULL");
}

TEST_F(PluginLaneTest, RunsInsideTheGapScheduler) {
  // Real clock here: only the outcome is checked (all bytes counted), never how fast.
  GapSchedulerOptions options;
  options.profile_iterations = 1;
  options.lane_memory_bytes = 1 << 16;
  options.quarantine_min_s = 1.0;  // a preempted microsecond step must not look like a runaway
  options.output_root = (dir_ / "run").string();
  std::vector<LaneSpec> specs = make_lane_specs(registry_, {"word_count"},
                                                {{"word_count", {{"input", input_}, {"chunk_bytes", "4"}}}}, "lanes.ini");
  std::vector<std::string> messages;
  GapScheduler scheduler(device_, std::move(specs), options, std::chrono::steady_clock::now(),
                         [&](const std::string& line) { messages.push_back(line); });
  scheduler.calibrate();
  for (int it = 0; it < 200 && !scheduler.summary().lanes.at("word_count").finished; ++it) {
    const auto arrival = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
    scheduler.fill(it, 0, WaitKind::Warmup, [arrival] { return std::chrono::steady_clock::now() >= arrival; });
    scheduler.end_iteration(it);
  }
  scheduler.teardown();
  const LaneStats lane = scheduler.summary().lanes.at("word_count");
  EXPECT_TRUE(messages.empty()) << messages[0];
  EXPECT_TRUE(lane.finished);
  EXPECT_GT(lane.calibration_units, 0);
  EXPECT_EQ(lane.units, static_cast<double>(fs::file_size(input_)));  // calibration's bytes included
  EXPECT_EQ(lane.report["words"], 9);
  EXPECT_TRUE(fs::exists(dir_ / "run" / "word_count" / "rank0" / "word_count.json"));
}

// ---------------------------------------------------------------------------------------
// LaneOptions

TEST(LaneOptionsTest, TypedGettersValidateAndNameFileSectionKey) {
  const LaneOptions options("pagerank", {{"iters", "12x"}, {"damping", "1.5"}, {"big", "99"}, {"on", "maybe"}},
                            "configs/pp4.ini");
  EXPECT_EQ(lane_error([&] { options.get_int("iters", 1, 1, 100); }),
            "configs/pp4.ini: [lane.pagerank] iters = '12x': expected an integer");
  EXPECT_EQ(lane_error([&] { options.get_int("big", 1, 1, 10); }),
            "configs/pp4.ini: [lane.pagerank] big = 99: expected an integer in [1, 10]");
  EXPECT_NE(lane_error([&] { options.get_double("damping", 0.85, 0, 1); }).find("damping = 1.5: expected a number in"),
            std::string::npos);
  EXPECT_EQ(lane_error([&] { options.get_bool("on", false); }),
            "configs/pp4.ini: [lane.pagerank] on = 'maybe': expected true or false");
  EXPECT_EQ(options.get_int("absent", 7, 0, 10), 7);
}

TEST(LaneOptionsTest, RejectUnknownNamesTheFirstUnreadKey) {
  const LaneOptions options("imageproc", {{"width", "64"}, {"widht", "32"}}, "a.ini");
  EXPECT_EQ(options.get_int("width", 1, 1, 4096), 64);
  EXPECT_EQ(lane_error([&] { options.reject_unknown(); }), "a.ini: [lane.imageproc] widht: unknown key for lane 'imageproc'");
}

}  // namespace
}  // namespace pipelane
