// What the training loop measures on each rank as it goes (step times, compute time within each
// step's compute window, the compute instructions' costs, losses and validations, the traced
// steps), and the pieces of summary.json (trainer/run/run_summary.h) rank 0 makes of every rank's
// measurements: each stage's busy and idle time, the measured bubble, the steady step time, the
// instructions' mean costs.
#pragma once
#include "trainer/run/layer.h"  // trainer/README.md: the layers
#include <cmath>
#include <vector>

#include "parallel/control_plane.h"
#include "parallel/pipeline_executor.h"
#include "parallel/rank_grid.h"
#include "trainer/config/train_options.h"
#include "trainer/run/run_summary.h"

namespace pipelane {

// Seconds and counts of each compute instruction (Fwd, Bwd, BwdWeight) over the timed steps.
class ComputeOpTimes {
 public:
  void add(Op op, double seconds) {
    seconds_[index(op)] += seconds;
    counts_[index(op)] += 1;
  }
  // Every rank's totals summed, so every rank has the job's means.
  void sum_over(ControlPlane& world) {
    world.all_reduce_sum(seconds_, kOps);
    world.all_reduce_sum(counts_, kOps);
  }
  double mean(Op op) const { return counts_[index(op)] > 0 ? seconds_[index(op)] / counts_[index(op)] : 0.0; }
  // In milliseconds; the backward is the whole one: for a split one, its input-gradient half plus
  // the weight half.
  MeasuredOpMs means_ms() const {
    const double f = mean(Op::Fwd), w = mean(Op::BwdWeight);
    return {f * 1e3, (mean(Op::Bwd) + w) * 1e3, w * 1e3};
  }

 private:
  static constexpr int kOps = 3;
  static int index(Op op) { return op == Op::Fwd ? 0 : op == Op::Bwd ? 1 : 2; }
  double seconds_[kOps] = {0, 0, 0};
  double counts_[kOps] = {0, 0, 0};
};

// One rank's measurements over the steps run() ran.
struct RankMeasurements {
  int steps_run = 0;
  int last_step = 0;  // 1-based; the step resumed at before any ran
  std::vector<double> step_seconds;
  double train_seconds = 0;
  // Compute time within the steps' compute windows (each ends when the last stage of the pipeline
  // finishes its last backward), after the first step, which pages memory in.
  double busy_s = 0, window_s = 0;
  ComputeOpTimes op_times;
  double last_loss = 0, last_val_loss = NAN;
  std::vector<EvalPoint> evals;
  std::vector<StepStats> traced;
  std::vector<int> traced_numbers;  // the 1-based step of each traced StepStats
};

// Collective. Adds step `step`'s (0-based) compute time and window to `m`, its compute
// instructions' costs unless it is the first step of the run (which pages memory in); with a
// single step configured, that one counts.
void add_compute_times(RankMeasurements& m, const StepStats& st, int step, int start_step, int steps,
                       ControlPlane& world);

// Collective: every rank's busy time and window (index = world rank), on every rank.
struct BusyByRank {
  std::vector<double> busy_s, window_s;
};
BusyByRank gather_busy_times(ControlPlane& world, const RankMeasurements& m);

// Each stage's busy and idle time (the mean over its tp x dp ranks) and bubble fraction.
std::vector<StageTime> stage_times(const RankGrid& grid, const BusyByRank& by_rank);
// The measured bubble: the stages' bubble fractions' mean.
double measured_bubble(const std::vector<StageTime>& stages);

// The median step time after the first two (or the first half, for short runs), which warm up.
double steady_step_seconds(const std::vector<double>& step_seconds);

// Layers of each pipeline stage, for the straggler's suggestion; empty for interleaved schedules
// (several chunks per stage).
std::vector<int> layers_per_stage(const TrainOptions& o);

}  // namespace pipelane
