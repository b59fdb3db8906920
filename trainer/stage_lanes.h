// The lanes of one rank during training: built from [lanes] and [lane.NAME], calibrated before
// step 1, handed to the executor as its gap filler, and reported at the end (summary and trace).
#pragma once
#include <chrono>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "lanes/gap_scheduler.h"
#include "parallel/topology.h"
#include "runtime/backend.h"
#include "trainer/train_options.h"

namespace pipelane {

class StageLanes {
 public:
  // Lanes off (nothing enabled, or not on this stage): scheduler() is null.
  StageLanes(const TrainOptions& opts, const Topology& topo, Backend& backend,
             std::chrono::steady_clock::time_point origin);
  GapScheduler* scheduler() { return scheduler_.get(); }
  // Rank-local calibration (setup + a few timed steps per lane, before training starts).
  nlohmann::json calibrate();
  void teardown();
  nlohmann::json summary() const;  // this rank's; {} when off
  // Lane steps on their own tracks (tid 10000 + 100 * rank + lane index).
  nlohmann::json trace_events(int world_rank) const;

 private:
  std::unique_ptr<GapScheduler> scheduler_;
};

// Rank 0 turns every rank's StageLanes::summary() into the totals of summary.json.
nlohmann::json combine_lane_summaries(const nlohmann::json& per_rank);
// One combine_lane_summaries per pipeline stage (over its tp x dp ranks), each with "stage".
nlohmann::json lane_summaries_per_stage(const nlohmann::json& per_rank, int stages);

}  // namespace pipelane
