#pragma once
#include "trainer/cli/layer.h"  // trainer/README.md: the layers
// `pipelane memory --config FILE [--section.key=value ...]`: the memory model's prediction
// (parallel/memory_model.h) for a config and a grid, per rank by category, before anything is
// allocated. `pipelane train --dry-run` prints the same and stops.
#include <cstdio>

#include "parallel/memory_model.h"
#include "trainer/config/train_options.h"

namespace pipelane {

int memory_command(int argc, char** argv);

// The memory model's input for a run of `opts` (element_bytes 4: pipelane's layout; 2: the 16-bit
// prediction). [parallel] dp 0 (the world decides) counts as one replica.
MemorySpec memory_spec_from(const TrainOptions& opts, int element_bytes);

// Storage the prediction is for: 4 (fp32, what pipelane stores) or 2 (16-bit, predicted only).
// Throws std::invalid_argument (one line) for a grid the model cannot be split into.
void print_memory_prediction(const TrainOptions& opts, int element_bytes, double device_memory_bytes, std::FILE* out);

}  // namespace pipelane
