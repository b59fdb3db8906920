// From one step's instruction records, training's compute after each wait (TrainingAfterGap,
// parallel/gap_filler.h): what the gap filler compares between gaps that held lane work and gaps
// that did not. Only compute counts: a send's or the optimizer's time also depends on other ranks
// (a buffer still in flight, the loss all-reduce), which would blur a comparison between gaps.
#pragma once
#include <vector>

#include "parallel/gap_filler.h"
#include "parallel/pipeline_executor.h"

namespace pipelane {

// `records` in instruction order (StepStats::records: the record at index i is gap id i's
// instruction). A wait followed by no compute before the next wait (the gradient sync before the
// optimizer) gets no entry.
std::vector<TrainingAfterGap> compute_after_waits(const std::vector<InstrRecord>& records);

}  // namespace pipelane
