// The console summary at the end of `pipelane train`: what summary.json says, in lines.
#pragma once
#include "trainer/cli/layer.h"  // trainer/README.md: the layers

#include "trainer/config/train_options.h"
#include "trainer/run/run_summary.h"

namespace pipelane {

// Rank 0's summary (its `training` part set, with the unigram baseline), on stdout.
void print_run_summary(const TrainOptions& opts, const RunSummary& summary);

}  // namespace pipelane
