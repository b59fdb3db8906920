// Which layers each virtual stage of a pipeline holds: the executor builds its chunks from it,
// the simulator its job's shape, checkpoints their shards' layer ranges.
#pragma once
#include <string>
#include <vector>

#include "model/gpt_config.h"

namespace pipelane {

// Layers of every virtual stage (pp * v of them, in pipeline order). `explicit_counts` is "" to
// split evenly, or comma-separated counts. Throws std::invalid_argument with one line.
std::vector<StageRange> split_layers(int layers, int pp, int virtual_stages,
                                     const std::string& explicit_counts);

}  // namespace pipelane
