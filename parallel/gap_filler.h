// What the executor does with a wait: hands it to a GapFiller (the lanes' gap scheduler) instead
// of blocking. parallel/ knows only this interface, never which lanes exist.
#pragma once
#include <functional>

#include "parallel/schedule.h"

namespace pipelane {

class GapFiller {
 public:
  virtual ~GapFiller() = default;
  // The stage reached instruction `gap_id` (its position in the stage's list) of `kind` and the
  // awaited transfer has not arrived. Fill the time, polling `arrived` between units of work, and
  // return as soon as it reports true (the executor then completes the transfer).
  virtual void fill(int iteration, int gap_id, WaitKind kind, const std::function<bool()>& arrived) = 0;
  // Once per optimizer step, after it, so the filler can update its predictions.
  virtual void end_iteration(int iteration) = 0;
};

}  // namespace pipelane
