// `pipelane schedule`: print each stage's instruction list (parallel/schedule), a text timeline of
// all stages under the unit-cost model (parallel/schedule_sim), and the bubble fractions.
#pragma once
#include "trainer/cli/layer.h"  // trainer/README.md: the layers

namespace pipelane {

// argv[0] is "schedule". Returns 0 on success; on bad input prints one line
// "pipelane schedule: <message>" to stderr and returns 2.
int schedule_command(int argc, char** argv);

}  // namespace pipelane
