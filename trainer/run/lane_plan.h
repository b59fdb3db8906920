// [lanes] plan = PATH: replay the lane plan of an earlier deterministic run, so that this run
// places the same lane steps in the same gaps whatever its own timing (lane outputs then repeat
// bit for bit). PATH is that run's summary.json: its "parallel" entry and each rank's
// "lanes.per_rank" entry (stage, lanes, profile_iterations, plan) say what the plan fits.
#pragma once
#include "trainer/run/layer.h"  // trainer/README.md: the layers
#include <map>

#include "lanes/lane_summary.h"
#include "parallel/rank_grid.h"
#include "trainer/config/train_options.h"

namespace pipelane {

// World rank -> its plan, for every rank of this run that runs lanes. ConfigError with one line
// naming the file unless the plan fits this run: the same schedule, pp, virtual stages,
// microbatches, tp and dp; the same lanes on the same ranks and stages; the same
// profile_iterations and control_every; a deterministic run that froze a plan.
std::map<int, LanePlan> load_lane_plans(const TrainOptions& options, ParallelDims dims);

}  // namespace pipelane
