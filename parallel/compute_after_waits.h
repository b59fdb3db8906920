// From one step's instruction records, training's compute after each wait (TrainingAfterGap,
// parallel/gap_filler.h): what the gap filler compares between gaps that held lane work and gaps
// that did not. Only compute counts: a send's or the optimizer's time also depends on other ranks
// (a buffer still in flight, the loss all-reduce), which would blur a comparison between gaps.
#pragma once
#include <vector>

#include "parallel/gap_filler.h"
#include "parallel/pipeline_executor.h"

namespace pipelane {

// CPU seconds of this whole process so far (CLOCK_PROCESS_CPUTIME_ID: every thread, kernel time
// included). Training's compute measured this way leaves out the time other processes took its
// core from it, which a rank's wall clock counts; a lane cannot take it (its worker is frozen while
// training computes, an in-process lane runs only inside fill()).
double process_cpu_seconds();

// `records` in instruction order (StepStats::records: the record at index i is gap id i's
// instruction). A wait followed by no compute before the next wait (the gradient sync before the
// optimizer) gets no entry. A record's CPU time is used where it was measured, its wall time where not.
std::vector<TrainingAfterGap> compute_after_waits(const std::vector<InstrRecord>& records);

}  // namespace pipelane
