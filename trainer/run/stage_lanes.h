// The lanes of one rank during training: built from [lanes] and [lane.NAME], calibrated before
// step 1, handed to the executor as its gap filler, and reported at the end (summary and trace).
#pragma once
#include "trainer/run/layer.h"  // trainer/README.md: the layers
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lanes/gap_scheduler.h"
#include "parallel/topology.h"
#include "runtime/backend.h"
#include "trainer/checkpoint/reader.h"
#include "trainer/run/chrome_trace.h"
#include "trainer/run/lane_valuation.h"
#include "trainer/run/summary_lanes.h"
#include "trainer/config/train_options.h"

namespace pipelane {

class StageLanes {
 public:
  // Lanes off (nothing enabled, or not on this stage): scheduler() is null. With [lanes] plan the
  // scheduler replays this rank's plan (ConfigError when it does not fit: trainer/run/lane_plan.h).
  StageLanes(const TrainOptions& opts, const Topology& topo, Backend& backend,
             std::chrono::steady_clock::time_point origin);
  GapScheduler* scheduler() { return scheduler_.get(); }
  // Rank-local calibration (setup + a few timed steps per lane, before training starts): lane ->
  // its calibrated step cost in seconds; empty when off.
  std::map<std::string, double> calibrate();
  void teardown();
  // This rank's summary (lanes/lane_summary.h), what crosses to rank 0; none when off.
  std::optional<StageLaneSummary> summary() const;
  // Lane steps on their own tracks (tid 10000 + 100 * rank + lane index).
  std::vector<TraceEvent> trace_events(int world_rank) const;

 private:
  std::unique_ptr<GapScheduler> scheduler_;
};

// This rank's lane progress in `reader`, when it can be restored: same grid (tp, pp, dp) and the
// same lane names configured on this world rank as when saved. Otherwise nullopt, with one line
// on stderr saying why (training state restores either way; the lanes start fresh). `lanes`:
// this rank's scheduler, null when its lanes are off.
std::optional<std::map<std::string, std::string>> saved_lane_progress(const CheckpointReader& reader,
                                                                      const Topology& topo, GapScheduler* lanes);

// Rank 0: summary.json's "lanes" (trainer/run/summary_lanes.h) from every rank's
// StageLanes::summary() (as gathered, in world-rank order): the total over all ranks and each
// stage's over its ranks, both valued (trainer/run/lane_valuation.h), and each rank's as it
// reported it (none where lanes were off).
TrainingLanes training_lanes(const std::vector<std::optional<StageLaneSummary>>& per_rank, int stages,
                             const LaneValuation& valuation, double train_seconds, double step_ms_median, int world,
                             std::optional<StepQuartiles> step_quartiles = std::nullopt);

}  // namespace pipelane
