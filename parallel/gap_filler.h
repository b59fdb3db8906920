// What the executor does with a wait: hands it to a GapFiller (the lanes' gap scheduler) instead
// of blocking. parallel/ knows only this interface, never which lanes exist.
#pragma once
#include <functional>
#include <vector>

#include "parallel/schedule.h"

namespace pipelane {

// How long training computed right after one wait: the compute instructions (Fwd, Bwd, BwdWeight)
// from the wait to the next wait. What work in the gap may have slowed (caches, memory).
struct TrainingAfterGap {
  int gap_id = 0;
  double compute_s = 0;
};

class GapFiller {
 public:
  virtual ~GapFiller() = default;
  // The stage reached instruction `gap_id` (its position in the stage's list) of `kind` and the
  // awaited transfer has not arrived. Fill the time, polling `arrived` between units of work, and
  // return as soon as it reports true (the executor then completes the transfer).
  virtual void fill(int iteration, int gap_id, WaitKind kind, const std::function<bool()>& arrived) = 0;
  // Once per optimizer step, before end_iteration: training's compute after each of the step's
  // waits that some compute followed. Default: not used.
  virtual void training_after_gaps(int /*iteration*/, const std::vector<TrainingAfterGap>& /*after*/) {}
  // Once per optimizer step, after it, so the filler can update its predictions.
  virtual void end_iteration(int iteration) = 0;
};

}  // namespace pipelane
