// The lanes of one rank during training: built from [lanes] and [lane.NAME], calibrated before
// step 1, handed to the executor as its gap filler, and reported at the end (summary and trace).
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lanes/gap_scheduler.h"
#include "parallel/topology.h"
#include "runtime/backend.h"
#include "trainer/lane_valuation.h"
#include "trainer/train_options.h"

namespace pipelane {

class StageLanes {
 public:
  // Lanes off (nothing enabled, or not on this stage): scheduler() is null. With [lanes] plan the
  // scheduler replays this rank's plan (ConfigError when it does not fit: trainer/lane_plan.h).
  StageLanes(const TrainOptions& opts, const Topology& topo, Backend& backend,
             std::chrono::steady_clock::time_point origin);
  GapScheduler* scheduler() { return scheduler_.get(); }
  // Rank-local calibration (setup + a few timed steps per lane, before training starts).
  nlohmann::json calibrate();
  void teardown();
  // This rank's summary (lanes/lane_summary.h) as JSON, what crosses to rank 0; null when off.
  nlohmann::json summary() const;
  // Lane steps on their own tracks (tid 10000 + 100 * rank + lane index).
  nlohmann::json trace_events(int world_rank) const;

 private:
  std::unique_ptr<GapScheduler> scheduler_;
};

// Rank 0: summary.json's "lanes" entry from every rank's StageLanes::summary() (as gathered, in
// world-rank order): "total" over all ranks and "per_stage" over each stage's ranks, both valued
// (trainer/lane_valuation.h), and "per_rank" as the ranks reported it (null where lanes were off).
nlohmann::json lanes_summary_json(const std::vector<std::string>& per_rank, int stages,
                                  const LaneValuation& valuation, double train_seconds, double step_ms_median,
                                  int world);

}  // namespace pipelane
