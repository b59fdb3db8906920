// `pipelane plan`: searches the ways to run a model on a cluster (pp, tp, dp, micro batch,
// schedule, virtual stages, layer split) within each device's memory, simulates each with and
// without lanes, and prints the frontier of training throughput against the lanes' value.
#pragma once
#include "trainer/cli/layer.h"  // trainer/README.md: the layers

namespace pipelane {

// argv[0] is "plan". 0 on success; one line "pipelane plan: <message>" and 2 on bad input.
int plan_command(int argc, char** argv);

}  // namespace pipelane
