// Runs a job's iterations through the schedule simulator under its cost model, with or without
// lanes, and measures the result the way a real run's summary.json does (busy and idle per stage
// within the compute window, the bubble fraction, the median iteration, the lanes' harvest).
#pragma once
#include <vector>

#include "parallel/schedule_sim.h"
#include "parallel/sim/job_costs.h"
#include "parallel/sim/lane_sim.h"

namespace pipelane::sim {

struct StageReport {
  // As `pipelane train` measures them, summed over the iterations after the first: compute time
  // (Fwd, Bwd, BwdWeight) and the rest of the compute window (the iteration's start until the
  // last stage's last compute instruction).
  double busy_s = 0, idle_s = 0, bubble_fraction = 0;
  // Idle time of the whole iterations (up to each iteration's end) by wait kind, all iterations.
  double idle_by_kind_s[5] = {0, 0, 0, 0, 0};
  // Lanes (all iterations): gap time, lane time inside gaps, the same after the profile
  // iterations, and lane time past the arrivals (the cost to training).
  double bubble_s = 0, harvested_s = 0, bubble_after_profiling_s = 0, harvested_after_profiling_s = 0;
  double overrun_s = 0;
  int gaps = 0;
};

struct JobSimReport {
  std::vector<double> iteration_s;
  double step_s_median = 0;    // over the iterations after the first two (the trainer's rule)
  double train_s = 0;          // all iterations
  double bubble_fraction = 0;  // the mean of the stages' bubble_fraction (summary.json's "measured")
  std::vector<StageReport> stages;
  std::vector<SimResult> timelines;  // the first `keep_timelines` iterations, for the trace
};

// iterations >= 1. `lanes` may be null (lanes off); otherwise it fills every wait and keeps its
// own records (steps, gaps, totals).
JobSimReport simulate_job(const ScheduleSpec& spec, const std::vector<std::vector<Instr>>& lists,
                          SimCostModel& model, LaneSimulator* lanes, int iterations, int keep_timelines);

}  // namespace pipelane::sim
