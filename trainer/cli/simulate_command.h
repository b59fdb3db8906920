// `pipelane simulate`: replays a job's schedules (the executor's instruction lists) under a cost
// model - a run's measured profile or a device table - on a cluster, with lanes in the simulated
// gaps, and writes summary.json (a real run's fields) and trace.json. See parallel/README.md.
#pragma once
#include "trainer/cli/layer.h"  // trainer/README.md: the layers

namespace pipelane {

// argv[0] is "simulate". 0 on success; one line "pipelane simulate: <message>" and 2 on bad input.
int simulate_command(int argc, char** argv);

}  // namespace pipelane
