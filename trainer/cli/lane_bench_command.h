#pragma once
#include "trainer/cli/layer.h"  // trainer/README.md: the layers

namespace pipelane {

// `pipelane lane-bench NAME`: one lane alone on one core, the dedicated throughput that lane
// work is valued at (FreeRide-style cost saving). argv[0] is "lane-bench".
int lane_bench_command(int argc, char** argv);

}  // namespace pipelane
